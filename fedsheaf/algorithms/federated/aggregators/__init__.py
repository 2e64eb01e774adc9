"""Server-side aggregation: how the server turns the clients' uploads into the new shared
vector (``federated.aggregator``, with ``federated.aggregator_args``).

Built-ins register in :data:`AGGREGATORS` by name, through the same path as a user's
aggregator, which is named either as an installed plug-in (entry-point group
``fedsheaf.aggregators``) or inline as ``"package.module:callable"``
(:class:`~fedsheaf.util.registry.Registry`). The callable is called with
``federated.aggregator_args`` as keyword arguments and returns an aggregator
(:class:`~.base.Aggregator`).
"""

from __future__ import annotations

import inspect
from typing import Any

from fedsheaf.algorithms.federated.aggregators.base import (
    Aggregator,
    aggregator_state,
    load_aggregator_state,
)
from fedsheaf.algorithms.federated.aggregators.fedadagrad import FedAdagrad
from fedsheaf.algorithms.federated.aggregators.fedadam import FedAdam
from fedsheaf.algorithms.federated.aggregators.fedavg import FedAvgAggregator
from fedsheaf.algorithms.federated.aggregators.fedyogi import FedYogi
from fedsheaf.algorithms.federated.aggregators.median import Median
from fedsheaf.algorithms.federated.aggregators.trimmed_mean import TrimmedMean
from fedsheaf.config.sections import FederatedConfig
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.registry import Registry

#: Every aggregator by name: the built-ins; installed plug-ins and "module:callable" too.
AGGREGATORS = Registry(
    "aggregator", "fedsheaf.aggregators", "federated.aggregator", "federated.aggregator_args"
)
for _name, _factory in (
    ("fedavg", FedAvgAggregator),
    ("fedadagrad", FedAdagrad),
    ("fedadam", FedAdam),
    ("fedyogi", FedYogi),
    ("median", Median),
    ("trimmed_mean", TrimmedMean),
):
    AGGREGATORS.register(_name, _factory)


def make_aggregator(fc: FederatedConfig) -> Any:
    """The server's aggregator, as ``federated.aggregator`` and ``aggregator_args`` name it.

    Raises ConfigError (one line naming ``federated.aggregator``) when the name does not
    resolve, the arguments do not fit, or what it builds has no
    ``aggregate(global_params, updates, counts, round_)``. An :class:`Aggregator` left
    with ``weighted=None`` takes ``federated.weighted``.
    """
    ref = fc.aggregator
    built = AGGREGATORS.create(ref, fc.aggregator_args)
    method = getattr(built, "aggregate", None)
    if not callable(method):
        raise ConfigError(
            f"config key 'federated.aggregator': {ref!r} built a {type(built).__name__}, "
            "which has no aggregate(global_params, updates, counts, round_) method"
        )
    try:
        inspect.signature(method).bind(None, None, None, None)
    except TypeError as exc:
        raise ConfigError(
            f"config key 'federated.aggregator': {ref!r} built a {type(built).__name__} whose "
            f"aggregate() cannot be called as aggregate(global_params, updates, counts, "
            f"round_): {exc}"
        ) from None
    except ValueError:  # no signature to read: the call will tell
        pass
    if isinstance(built, Aggregator) and built.weighted is None:
        built.weighted = fc.weighted
    return built


def describe_aggregator(fc: FederatedConfig) -> str:
    """The aggregator in words (``fedadam {eta: 0.1}``), for the run's first lines."""
    args = ", ".join(f"{k}: {v!r}" for k, v in fc.aggregator_args.items())
    return fc.aggregator + (f" {{{args}}}" if args else "")


__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "FedAdagrad",
    "FedAdam",
    "FedAvgAggregator",
    "FedYogi",
    "Median",
    "TrimmedMean",
    "aggregator_state",
    "describe_aggregator",
    "load_aggregator_state",
    "make_aggregator",
]
