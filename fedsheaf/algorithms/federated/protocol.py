"""The server's side of the protocol, as plain functions (no MPI, no torch).

* how many and which clients take part in a round (seeded, per round);
* where client ``c`` lives: rank ``1 + c mod W`` with W worker ranks;
* the (weighted) average of the uploaded vectors.
"""

from __future__ import annotations

import math

import numpy as np

from fedsheaf.seeding import rng


def n_selected(n_clients: int, fraction: float) -> int:
    """Clients per round: ``max(1, floor(r * N))`` (as the FedRep authors' code)."""
    return max(1, min(n_clients, math.floor(fraction * n_clients + 1e-9)))


def sample_clients(n_clients: int, fraction: float, seed: int, round_: int) -> np.ndarray:
    """The clients of round ``round_``: sorted ids drawn without replacement.

    The draw depends only on ``(seed, round_)``, so a round can be replayed.
    """
    m = n_selected(n_clients, fraction)
    picks = rng(seed, "sample", round_).choice(n_clients, size=m, replace=False)
    return np.sort(picks).astype(np.int64)


def client_rank(client: int, n_workers: int) -> int:
    """Rank hosting ``client`` when W = ``n_workers`` ranks (1..W) host clients."""
    return 1 + client % n_workers


def hosted_clients(rank: int, n_clients: int, n_workers: int) -> list[int]:
    """Clients living on ``rank`` (none on the server, rank 0)."""
    if rank < 1:
        return []
    return list(range(rank - 1, n_clients, n_workers))


def rows_per_rank(clients: np.ndarray | list[int], n_workers: int) -> list[int]:
    """How many of ``clients`` each rank 0..W holds (rank 0, the server: none)."""
    counts = [0] * (n_workers + 1)
    for c in clients:
        counts[client_rank(int(c), n_workers)] += 1
    return counts


def average(updates: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Mean of the rows of ``updates`` (k × P), weighted by ``weights`` when given.

    Sums in float64 in row order and returns float32; the caller fixes the row
    order (client id), so the result does not depend on how clients map to ranks.
    """
    u = np.asarray(updates, dtype=np.float64)
    if u.ndim != 2 or u.shape[0] == 0:
        raise ValueError(f"average needs a non-empty k x P array, got shape {u.shape}")
    if weights is None:
        w = np.full(u.shape[0], 1.0 / u.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (u.shape[0],) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be one non-negative number per row, not all zero")
        w = w / w.sum()
    out = np.zeros(u.shape[1], dtype=np.float64)
    for wk, row in zip(w, u, strict=True):
        out += wk * row
    return out.astype(np.float32)
