"""Algorithms: one file each over a shared base.

``DECENTRALIZED`` maps an algorithm name to what builds it on one rank:
``DECENTRALIZED[name](agent, nbr, reporter)``. ``sheaf_frl`` picks its class from
``sheaf.variant``. ``HUB_AGENTS``/``HUB_SERVERS`` hold the two sides of the
centralized baselines that run with a server rank (``fedsheaf.launch.hub``).
"""

from collections.abc import Callable

from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm, Exchange, Reporter
from fedsheaf.algorithms.comfed import ComFed
from fedsheaf.algorithms.fedmuscle import FedMuscle, FedMuscleServer
from fedsheaf.algorithms.fedproto import FedProto, FedProtoServer
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.algorithms.sheaf_fmtl import SheafFMTL
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.algorithms.sheaf_frl_variants import HomogeneousSheafFRL, StrictSheafFRL
from fedsheaf.config.sections import ExperimentConfig

SHEAF_VARIANTS: dict[str, type[SheafFRL]] = {
    "standard": SheafFRL,
    "homogeneous": HomogeneousSheafFRL,
    "strict": StrictSheafFRL,
}


def sheaf_frl(agent: Agent, nbr: Exchange, reporter: Reporter) -> SheafFRL:
    """Sheaf-FRL in the variant the config asks for (``sheaf.variant``)."""
    return SHEAF_VARIANTS[agent.cfg.sheaf.variant](agent, nbr, reporter)


DECENTRALIZED: dict[str, Callable[[Agent, Exchange, Reporter], DecentralizedAlgorithm]] = {
    "sheaf_frl": sheaf_frl,
    "noncoop": NonCooperative,
    "comfed": ComFed,
    "sheaf_fmtl": SheafFMTL,
}

# Centralized heterogeneous baselines (fedsheaf.launch.hub): agent and server sides.
HUB_AGENTS = {"fedproto": FedProto, "fedmuscle": FedMuscle}
HUB_SERVERS = {"fedproto": FedProtoServer, "fedmuscle": FedMuscleServer}


def agent_class(cfg: ExperimentConfig) -> type[DecentralizedAlgorithm]:
    """The class of one graph agent of ``cfg`` (decentralized or hub method)."""
    if cfg.algorithm in HUB_AGENTS:
        return HUB_AGENTS[cfg.algorithm]
    if cfg.algorithm == "sheaf_frl":
        return SHEAF_VARIANTS[cfg.sheaf.variant]
    cls = DECENTRALIZED[cfg.algorithm]
    assert isinstance(cls, type)
    return cls
