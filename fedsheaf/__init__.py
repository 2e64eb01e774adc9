"""fedsheaf: MPI-native federated representation learning (Sheaf-FRL, FedAvg family).

The public Python API is the names in :data:`__all__` (see :mod:`fedsheaf.api`):

* :func:`run` -- run an experiment from a script (under ``mpiexec``: on every rank) and
  get its :class:`RunSummary`;
* :func:`load_run` -- read a run directory back (:class:`Run`: config, per-epoch and
  per-agent records that ``pandas.DataFrame`` takes as they are, summary);
* decorators registering one's own code by name, in this process, as the built-ins are:
  :func:`register_dataset` (``data.dataset``), :func:`register_model`
  (``agents[i].model``), :func:`register_server_model` (``federated.model``),
  :func:`register_partition` (``data.partition`` and ``federated.partition``),
  :func:`register_algorithm` (``algorithm``), :func:`register_aggregator`
  (``federated.aggregator``);
* :class:`GeneratorDropout` -- the dropout a plug-in model must use (its masks derive
  from the run seed);
* :class:`FedsheafError`, :class:`ConfigError` -- the user errors they raise.

Everything else is private by convention. The names load on first use, so that
``import fedsheaf`` stays cheap (it imports neither torch nor MPI; only
:class:`GeneratorDropout`, a torch module, imports torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "FedsheafError",
    "GeneratorDropout",
    "Run",
    "RunSummary",
    "__version__",
    "load_run",
    "register_aggregator",
    "register_algorithm",
    "register_dataset",
    "register_model",
    "register_partition",
    "register_server_model",
    "run",
]

#: Each lazily loaded public name -> the module that defines it.
_LAZY = {
    "run": "fedsheaf.api",
    "load_run": "fedsheaf.api",
    "register_aggregator": "fedsheaf.api",
    "register_algorithm": "fedsheaf.api",
    "register_dataset": "fedsheaf.api",
    "register_model": "fedsheaf.api",
    "register_partition": "fedsheaf.api",
    "register_server_model": "fedsheaf.api",
    "GeneratorDropout": "fedsheaf.models.seeded",
    "Run": "fedsheaf.api",
    "RunSummary": "fedsheaf.api",
    "ConfigError": "fedsheaf.util.errors",
    "FedsheafError": "fedsheaf.util.errors",
}

if TYPE_CHECKING:
    from fedsheaf.api import (
        Run,
        RunSummary,
        load_run,
        register_aggregator,
        register_algorithm,
        register_dataset,
        register_model,
        register_partition,
        register_server_model,
        run,
    )
    from fedsheaf.models.seeded import GeneratorDropout
    from fedsheaf.util.errors import ConfigError, FedsheafError


def __getattr__(name: str) -> Any:
    """Load a public name of :data:`__all__` on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fedsheaf' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
