"""Prototype pilots (seed 000, App. B): group centroids of the shared pilot set.

The pilot pool is partitioned into groups once — by class label (supervised) or by
k-means (unsupervised) — and each pilot column of ``A_i`` becomes a group mean
``f̄_{i,c} = mean_{k ∈ S'_c} f_i(x^k)`` over a seeded subset ``S'_c`` of the group
(an unbiased estimate of the full centroid at a fraction of the forward passes).

Every rank must use the same groups and the same subsets. Both are pure functions
of the pilot inputs/labels and the run seed, computed without BLAS reductions
whose order could depend on the thread count, so all ranks agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedsheaf.util.errors import ConfigError

__all__ = ["PrototypeStream", "class_groups", "group_means", "kmeans_groups", "pooled_inputs"]

_STREAM_SALT = 0x7072


def class_groups(labels: np.ndarray) -> list[np.ndarray]:
    """Positions of each class present in ``labels`` (ascending class id)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ConfigError("class prototype pilots need a non-empty vector of pilot labels")
    return [np.flatnonzero(labels == c) for c in np.unique(labels)]


def pooled_inputs(x: Tensor, side: int = 7) -> np.ndarray:
    """Images ``(n, C, H, W)`` average-pooled to at most ``side × side``, flattened, float64.

    A cheap, deterministic feature space for clustering the pilot inputs.
    """
    if x.ndim != 4:
        raise ValueError(f"expected images (n, C, H, W), got shape {tuple(x.shape)}")
    h, w = x.shape[-2:]
    pooled = torch.nn.functional.adaptive_avg_pool2d(
        x.detach().to("cpu", torch.float64), (min(side, h), min(side, w))
    )
    return pooled.flatten(1).numpy()


def _sq_dists(x: np.ndarray, centres: np.ndarray, chunk: int = 512) -> np.ndarray:
    # Elementwise differences and a per-row sum: no matrix product, so the result does
    # not depend on how many BLAS threads a rank happens to run. Chunked over rows to
    # keep the (rows × k × p) temporary small.
    out = np.empty((x.shape[0], centres.shape[0]))
    for s in range(0, x.shape[0], chunk):
        out[s : s + chunk] = ((x[s : s + chunk, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    return out


def kmeans_groups(x: np.ndarray, k: int, seed: int, iters: int = 25) -> list[np.ndarray]:
    """Lloyd's k-means (k-means++ start) of the rows of ``x``; returns k non-empty groups.

    Parameters
    ----------
    x:
        ``(n, p)`` features, ``n ≥ k``.
    k:
        Number of groups.
    seed:
        Seeds the k-means++ draws; equal inputs and seeds give equal groups.
    iters:
        Maximum Lloyd iterations (stops early when assignments stop changing).

    Returns
    -------
    list of arrays
        Positions of the members of each group, groups ordered by their smallest member.
        An emptied cluster takes the point farthest from its centre among groups with
        more than one member.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ConfigError(f"k-means pilots need 1 <= k <= {n} (pilot pool size), got k={k}")
    rng = np.random.default_rng([int(seed), _STREAM_SALT, k])
    centres = [x[rng.integers(n)]]
    d2 = _sq_dists(x, np.array(centres))[:, 0]
    for _ in range(1, k):
        total = d2.sum()
        pick = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
        centres.append(x[pick])
        d2 = np.minimum(d2, ((x - x[pick]) ** 2).sum(axis=1))
    c = np.array(centres)
    assign = np.full(n, -1)
    for _ in range(iters):
        dist = _sq_dists(x, c)
        new = dist.argmin(axis=1)
        for g in range(k):  # keep every group non-empty: take a far point of a shared group
            if not np.any(new == g):
                sizes = np.bincount(new, minlength=k)
                movable = np.flatnonzero(sizes[new] > 1)
                far = int(movable[dist[movable, new[movable]].argmax()])
                new[far] = g
        if np.array_equal(new, assign):
            break
        assign = new
        c = np.array([x[assign == g].mean(axis=0) for g in range(k)])
    groups = [np.flatnonzero(assign == g) for g in range(k)]
    return sorted(groups, key=lambda g: int(g[0]))


class PrototypeStream:
    """Seeded member subsets of every group, per ``(epoch, step)``.

    ``indices(epoch, step)`` returns ``G·m`` positions into the pilot pool: group g's
    ``m`` members occupy slots ``[g·m, (g+1)·m)``. Each group is walked through a
    fresh seeded permutation per epoch (cycled when shorter than needed), so a group
    smaller than ``m`` repeats members.
    """

    def __init__(self, groups: list[np.ndarray], members: int, seed: int) -> None:
        if not groups or any(len(g) == 0 for g in groups):
            raise ConfigError("prototype pilots need non-empty groups")
        if members < 1:
            raise ConfigError(f"prototype_members must be >= 1, got {members}")
        self.groups = [np.asarray(g, dtype=np.int64) for g in groups]
        self.members = int(members)
        self.seed = int(seed)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def indices(self, epoch: int, step: int) -> np.ndarray:
        out = []
        for g, positions in enumerate(self.groups):
            rng = np.random.default_rng([self.seed, _STREAM_SALT, int(epoch), g])
            perm = rng.permutation(len(positions))
            slots = (step * self.members + np.arange(self.members)) % len(positions)
            out.append(positions[perm[slots]])
        return np.concatenate(out).astype(np.int64)


def group_means(features: Tensor, n_groups: int) -> Tensor:
    """``(G·m, d)`` member features laid out as in :class:`PrototypeStream` → ``(G, d)``."""
    if features.ndim != 2 or features.shape[0] % n_groups:
        raise ValueError(
            f"cannot split {tuple(features.shape)} features into {n_groups} equal groups"
        )
    return features.reshape(n_groups, -1, features.shape[1]).mean(dim=1)
