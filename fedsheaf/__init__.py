"""fedsheaf: MPI-native federated representation learning (Sheaf-FRL, FedAvg family).

The public Python API is the names in :data:`__all__` (see :mod:`fedsheaf.api`):

* :func:`run` -- run an experiment from a script (under ``mpiexec``: on every rank) and
  get its :class:`RunSummary`;
* :func:`load_run` -- read a run directory back (:class:`Run`: config, per-epoch and
  per-agent records that ``pandas.DataFrame`` takes as they are, summary);
* :func:`register_aggregator` -- a decorator registering a server aggregator by name;
* :class:`FedsheafError`, :class:`ConfigError` -- the user errors they raise.

Everything else is private by convention. The names load on first use, so that
``import fedsheaf`` stays cheap (it imports neither torch nor MPI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "FedsheafError",
    "Run",
    "RunSummary",
    "__version__",
    "load_run",
    "register_aggregator",
    "run",
]

#: Each lazily loaded public name -> the module that defines it.
_LAZY = {
    "run": "fedsheaf.api",
    "load_run": "fedsheaf.api",
    "register_aggregator": "fedsheaf.api",
    "Run": "fedsheaf.api",
    "RunSummary": "fedsheaf.api",
    "ConfigError": "fedsheaf.util.errors",
    "FedsheafError": "fedsheaf.util.errors",
}

if TYPE_CHECKING:
    from fedsheaf.api import Run, RunSummary, load_run, register_aggregator, run
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
