"""A partition plug-in: label-sorted contiguous chunks with an IID share.

fedsheaf calls a partition as ``fn(labels, n_parties, seed=seed, **partition_args)`` and
expects one array of sample indices per party (agent or client), pairwise disjoint and
in range; samples in no array are left unused. Graph runs hold the shared pilots out
first and pass the rest; server-based runs pass the training split.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sorted_chunks"]


def sorted_chunks(
    labels: np.ndarray, n_parties: int, seed: int, *, iid: float = 0.0
) -> list[np.ndarray]:
    """A seeded ``iid`` share of the samples dealt round-robin; the rest sorted by label
    and cut into ``n_parties`` contiguous chunks (party i gets the i-th block of classes).

    ``iid=0`` is the "pathological" non-IID split of the FL literature (each party sees
    about ``n_classes / n_parties`` classes); ``iid=1`` is an IID split.
    """
    if not 0.0 <= iid <= 1.0:
        raise ValueError(f"iid must be in [0, 1], got {iid}")
    labels = np.asarray(labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_iid = round(iid * len(order))
    mixed, rest = order[:n_iid], order[n_iid:]
    rest = rest[np.argsort(labels[rest], kind="stable")]
    chunks = np.array_split(rest, n_parties)
    return [np.concatenate([mixed[i::n_parties], chunks[i]]) for i in range(n_parties)]
