"""Decentralized algorithms by name (config key ``algorithm``, with ``algorithm_args``),
through :class:`~fedsheaf.util.registry.Registry`.

Built-ins, registered here as a user's are: ``sheaf_frl`` (its class chosen by
``sheaf.variant``), ``noncoop``, ``comfed``, ``sheaf_fmtl``. A user's algorithm is an
installed plug-in (entry-point group ``fedsheaf.algorithms``) or inline
``"package.module:callable"``, called on every rank as::

    factory(agent, nbr, reporter, **algorithm_args) -> DecentralizedAlgorithm

where ``agent`` is the rank's :class:`~fedsheaf.algorithms.base.Agent` (config, graph,
data, model, device), ``nbr`` its neighbourhood (:class:`~fedsheaf.algorithms.base.Exchange`)
and ``reporter`` takes its evaluation records. The simplest factory is a subclass of
:class:`~fedsheaf.algorithms.base.DecentralizedAlgorithm` (or of a built-in, such as
:class:`~fedsheaf.algorithms.noncoop.NonCooperative`) overriding a hook; its
:meth:`~fedsheaf.algorithms.base.DecentralizedAlgorithm.state_dict` (model, optimizer,
RNG, :meth:`~fedsheaf.algorithms.base.DecentralizedAlgorithm.extra_state`) is what its
checkpoints hold. The methods with a server rank (fedproto, fedmuscle) and the
server-based ones stay built-in names (the server-based plug point is the aggregator).

Whatever is wrong (the name is unknown or does not import, the factory does not take
these arguments, it builds something else) is one ConfigError line naming ``algorithm``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from fedsheaf.algorithms.base import Agent, AgentData, DecentralizedAlgorithm, Exchange, Reporter
from fedsheaf.algorithms.comfed import ComFed
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.algorithms.sheaf_fmtl import SheafFMTL
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.algorithms.sheaf_frl_variants import HomogeneousSheafFRL, StrictSheafFRL
from fedsheaf.config.sections import (
    ALGORITHM_GROUP,
    ALGORITHMS,
    DECENTRALIZED,
    REGISTERED_ALGORITHMS,
    ExperimentConfig,
    unknown_algorithm,
)
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.registry import Factory, Registry

__all__ = [
    "ALGORITHMS_REGISTRY",
    "SHEAF_VARIANTS",
    "algorithm_factory",
    "build_offline",
    "check_algorithm",
    "make_algorithm",
    "sheaf_frl",
]

SHEAF_VARIANTS: dict[str, type[SheafFRL]] = {
    "standard": SheafFRL,
    "homogeneous": HomogeneousSheafFRL,
    "strict": StrictSheafFRL,
}


def sheaf_frl(agent: Agent, nbr: Exchange, reporter: Reporter) -> SheafFRL:
    """Sheaf-FRL in the variant the config asks for (``sheaf.variant``)."""
    return SHEAF_VARIANTS[agent.cfg.sheaf.variant](agent, nbr, reporter)


class AlgorithmRegistry(Registry):
    """The registry of decentralized algorithms; an unknown name is told among every
    built-in method (:func:`fedsheaf.config.sections.unknown_algorithm`), so that a typo
    of a server-based one (``fedavgg``) is answered too."""

    def register(self, name: str, factory: Factory) -> Factory:
        """Register ``factory`` under ``name``, a name no built-in method has; the config
        then accepts it (:data:`fedsheaf.config.sections.REGISTERED_ALGORITHMS`)."""
        if name in ALGORITHMS and name not in DECENTRALIZED:
            raise ValueError(f"algorithm {name!r} is a built-in method's name")
        registered = super().register(name, factory)
        if name not in ALGORITHMS:
            REGISTERED_ALGORITHMS.add(name)
        return registered

    def _unknown(self, ref: str, plugins: Mapping[str, Any]) -> ConfigError:
        return unknown_algorithm(ref, [*plugins, *self.builtin])


#: Every decentralized algorithm by name: the built-ins; installed plug-ins and
#: "module:callable" too.
ALGORITHMS_REGISTRY = AlgorithmRegistry("algorithm", ALGORITHM_GROUP, "algorithm", "algorithm_args")
for _name, _factory in (
    ("sheaf_frl", sheaf_frl),
    ("noncoop", NonCooperative),
    ("comfed", ComFed),
    ("sheaf_fmtl", SheafFMTL),
):
    ALGORITHMS_REGISTRY.register(_name, _factory)


_BASE = "fedsheaf.algorithms.base.DecentralizedAlgorithm"


def _fail(ref: str, what: str) -> ConfigError:
    return ConfigError(f"config key 'algorithm': algorithm {ref!r} {what}")


def _shown(kwargs: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in kwargs.items()) + "}"


def algorithm_factory(cfg: ExperimentConfig) -> Factory:
    """The factory ``cfg.algorithm`` names, checked without calling it: it resolves, a
    class is a DecentralizedAlgorithm, and it can be called as
    ``factory(agent, nbr, reporter, **cfg.algorithm_args)``. ConfigError (one line) if not."""
    ref = cfg.algorithm
    factory = ALGORITHMS_REGISTRY.resolve(ref)
    if isinstance(factory, type) and not issubclass(factory, DecentralizedAlgorithm):
        raise _fail(ref, f"is the class {factory.__name__}, not a {_BASE} subclass")
    try:
        inspect.signature(factory).bind(None, None, None, **cfg.algorithm_args)
    except TypeError as exc:
        raise _fail(
            ref,
            "cannot be called as factory(agent, nbr, reporter, **algorithm_args) with "
            f"algorithm_args {_shown(cfg.algorithm_args)}: {exc}",
        ) from None
    except ValueError:  # no signature to read: the call will tell
        pass
    return factory


def _built(ref: str, built: object) -> DecentralizedAlgorithm:
    if not isinstance(built, DecentralizedAlgorithm):
        raise _fail(
            ref,
            f"returned an instance of {type(built).__name__}, not a {_BASE} (subclass it, "
            "or a built-in such as fedsheaf.algorithms.noncoop.NonCooperative)",
        )
    return built


def make_algorithm(agent: Agent, nbr: Exchange, reporter: Reporter) -> DecentralizedAlgorithm:
    """The rank's algorithm, as ``agent.cfg.algorithm`` and ``algorithm_args`` name it.

    A plug-in's own ValueError or TypeError while it is built is one ConfigError line,
    as is a return that is not a DecentralizedAlgorithm."""
    cfg = agent.cfg
    factory = algorithm_factory(cfg)
    try:
        built = factory(agent, nbr, reporter, **cfg.algorithm_args)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        if cfg.algorithm in DECENTRALIZED:
            raise
        why = " ".join(str(exc).split())
        raise _fail(cfg.algorithm, f"failed to build: {type(exc).__name__}: {why}") from None
    return _built(cfg.algorithm, built)


class _Offline:
    """A neighbourhood that cannot communicate (:func:`build_offline`'s trial build)."""

    class Used(Exception):
        """The algorithm tried to communicate while being built."""

    def __init__(self, neighbours: list[int]) -> None:
        self.neighbours = neighbours

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise self.Used

    exchange = exchange_each = start_exchange = start_exchange_each = _refuse

    def take_round_bytes(self) -> dict[int, int]:
        return {}


class _Silent:
    def epoch(self, record: dict[str, Any]) -> None:
        pass


def check_algorithm(cfg: ExperimentConfig, data: AgentData) -> None:
    """What building ``cfg``'s decentralized algorithm for an agent holding ``data`` would
    refuse, without communicating (``fedsheaf check``): the factory resolves and fits
    (:func:`algorithm_factory`), and a class runs its ``check``."""
    factory = algorithm_factory(cfg)
    if cfg.algorithm == "sheaf_frl":
        factory = SHEAF_VARIANTS[cfg.sheaf.variant]
    if isinstance(factory, type) and issubclass(factory, DecentralizedAlgorithm):
        factory.check(cfg, data)


def build_offline(agent: Agent) -> None:
    """Build a plug-in algorithm once for ``agent`` with a neighbourhood that cannot
    communicate (``fedsheaf check``): what it builds must be a DecentralizedAlgorithm.
    One that communicates while being built is left to the job; built-ins are not built."""
    if agent.cfg.algorithm in DECENTRALIZED:
        return
    try:
        make_algorithm(agent, _Offline(agent.graph.neighbours(agent.id)), _Silent())
    except _Offline.Used:
        pass
