"""Partitions by name (``data.partition`` for graph runs, ``federated.partition`` for
server-based runs), through :class:`~fedsheaf.util.registry.Registry`.

Built-ins: ``label_shift`` (SPEC Eq. 23) and ``dirichlet`` for the graph family,
``shards`` (FedRep) and ``dirichlet`` for the server-based family. A user's partition
is an installed plug-in (entry-point group ``fedsheaf.partitions``) or inline
``"package.module:callable"``, called as::

    fn(labels, n_parties, seed=seed, **partition_args) -> sequence of n_parties index arrays

``labels`` is an int64 class-id vector; the arrays hold positions in it, pairwise
disjoint (samples left out are unused). The return is checked
(:func:`check_pools`); any fault is one ConfigError line naming the key.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsheaf.data.partition import (
    PartitionFn,
    dirichlet_partition,
    fedrep_shards,
    label_shift_partition,
)
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.registry import Registry

__all__ = [
    "GRAPH_PARTITIONS",
    "SERVER_PARTITIONS",
    "check_pools",
    "partition_kwargs",
    "run_partition",
]

#: Graph (decentralized and hub) runs: ``data.partition``.
GRAPH_PARTITIONS = Registry(
    "partition", "fedsheaf.partitions", "data.partition", "data.partition_args"
)
GRAPH_PARTITIONS.register("label_shift", label_shift_partition)
GRAPH_PARTITIONS.register("dirichlet", dirichlet_partition)

#: Server-based runs: ``federated.partition``.
SERVER_PARTITIONS = Registry(
    "partition", "fedsheaf.partitions", "federated.partition", "federated.partition_args"
)
SERVER_PARTITIONS.register("shards", fedrep_shards)
SERVER_PARTITIONS.register("dirichlet", dirichlet_partition)


def check_pools(pools: Any, n_items: int, n_parties: int, key: str, ref: str) -> list[np.ndarray]:
    """``pools`` as int64 arrays, or a one-line ConfigError naming ``key``: one array per
    party, integer indices in ``[0, n_items)``, no index twice."""

    def fail(what: str) -> ConfigError:
        return ConfigError(f"config key '{key}': partition {ref!r} {what}")

    if (
        isinstance(pools, np.ndarray)
        and pools.ndim != 2
        or not isinstance(pools, Sequence | np.ndarray)
    ):
        raise fail(f"must return a sequence of index arrays, returned a {type(pools).__name__}")
    if len(pools) != n_parties:
        raise fail(f"returned {len(pools)} index arrays for {n_parties} parties (one each)")
    out = []
    seen = np.full(n_items, -1, dtype=np.int64)
    for i, p in enumerate(pools):
        arr = np.asarray(p)
        if arr.size == 0:
            out.append(np.zeros(0, dtype=np.int64))
            continue
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise fail(
                f"returned for party {i} a {arr.dtype} array of shape {arr.shape}, "
                "not a 1-D integer index array"
            )
        arr = arr.astype(np.int64)
        if arr.min() < 0 or arr.max() >= n_items:
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise fail(f"returned index {bad} for party {i}, outside [0, {n_items - 1}]")
        uniq, cnt = np.unique(arr, return_counts=True)
        if np.any(cnt > 1):
            raise fail(f"returned index {int(uniq[cnt > 1][0])} twice for party {i}")
        clash = seen[arr] >= 0
        if clash.any():
            j = int(arr[clash][0])
            raise fail(
                f"returned overlapping index arrays: index {j} in parties {int(seen[j])} and {i}"
            )
        seen[arr] = i
        out.append(arr)
    return out


def run_partition(
    registry: Registry,
    ref: str,
    labels: np.ndarray,
    n_parties: int,
    seed: int,
    kwargs: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Call the partition ``ref`` names as ``fn(labels, n_parties, seed=seed, **kwargs)`` and
    check its return (:func:`check_pools`). Arguments it does not take, and its own
    ValueError/TypeError/DataError, are one ConfigError naming the keys."""
    fn: PartitionFn = registry.resolve(ref)
    kwargs = dict(kwargs or {})
    shown = "{" + ", ".join(f"{k}: {v!r}" for k, v in kwargs.items()) + "}"
    try:
        inspect.signature(fn).bind(labels, n_parties, seed=seed, **kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"config key '{registry.key}': partition {ref!r} cannot be called as "
            f"fn(labels, n_parties, seed=..., **{registry.args_key}={shown}): {exc}"
        ) from None
    except ValueError:  # no signature to read: the call will tell
        pass
    try:
        pools = fn(labels, n_parties, seed=seed, **kwargs)
    except ConfigError as exc:
        raise ConfigError(f"config key '{registry.key}': {exc}") from None
    except (ValueError, TypeError, IndexError) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(
            f"config key '{registry.key}': partition {ref!r} failed: {type(exc).__name__}: {why}"
        ) from None
    return check_pools(pools, int(labels.shape[0]), n_parties, registry.key, ref)


def partition_kwargs(
    ref: str, alpha: float, args: Mapping[str, Any], section: str
) -> dict[str, Any]:
    """The keyword arguments of partition ``ref``: ``<section>.partition_args``, plus
    ``alpha`` from ``<section>.dirichlet_alpha`` for the built-in ``dirichlet``."""
    kwargs = dict(args)
    if ref.strip() == "dirichlet":
        if "alpha" in kwargs:
            raise ConfigError(
                f"config key '{section}.partition_args': set the dirichlet alpha with "
                f"{section}.dirichlet_alpha, not alpha in {section}.partition_args"
            )
        kwargs["alpha"] = alpha
    return kwargs
