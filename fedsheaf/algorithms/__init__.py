"""Algorithms: one file each over a shared base.

Decentralized algorithms are looked up by name in
:data:`~fedsheaf.algorithms.registry.ALGORITHMS_REGISTRY` (built-ins, installed plug-ins,
``"package.module:callable"``) and built on one rank by
:func:`~fedsheaf.algorithms.registry.make_algorithm`; ``sheaf_frl`` picks its class from
``sheaf.variant``. ``DECENTRALIZED`` maps each built-in name to its registered factory
(``DECENTRALIZED[name](agent, nbr, reporter)``). ``HUB_AGENTS``/``HUB_SERVERS`` hold the
two sides of the centralized baselines that run with a server rank
(``fedsheaf.launch.hub``).
"""

from collections.abc import Callable

from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm, Exchange, Reporter
from fedsheaf.algorithms.fedmuscle import FedMuscle, FedMuscleServer
from fedsheaf.algorithms.fedproto import FedProto, FedProtoServer
from fedsheaf.algorithms.registry import (
    ALGORITHMS_REGISTRY,
    SHEAF_VARIANTS,
    algorithm_factory,
    build_offline,
    check_algorithm,
    make_algorithm,
    sheaf_frl,
)

__all__ = [
    "ALGORITHMS_REGISTRY",
    "DECENTRALIZED",
    "HUB_AGENTS",
    "HUB_SERVERS",
    "SHEAF_VARIANTS",
    "algorithm_factory",
    "build_offline",
    "check_algorithm",
    "make_algorithm",
    "sheaf_frl",
]

#: The built-in decentralized algorithms, by name, as registered.
DECENTRALIZED: dict[str, Callable[[Agent, Exchange, Reporter], DecentralizedAlgorithm]] = {
    name: ALGORITHMS_REGISTRY.resolve(name) for name in ALGORITHMS_REGISTRY.builtin
}

# Centralized heterogeneous baselines (fedsheaf.launch.hub): agent and server sides.
HUB_AGENTS = {"fedproto": FedProto, "fedmuscle": FedMuscle}
HUB_SERVERS = {"fedproto": FedProtoServer, "fedmuscle": FedMuscleServer}
