"""The server's side of the protocol, as plain functions (no MPI; no torch calls).

* how many and which clients take part in a round (seeded, per round);
* where client ``c`` lives (its *home*): rank ``1 + c mod W`` with W worker ranks;
* which rank trains each sampled client this round (:func:`place_clients`): its
  home (``static``), or longest-first to the least-loaded rank (``balanced``); for
  ``dynamic`` the server deals :func:`dispatch_order` to whichever worker asks first
  (the runtime does that, over MPI);
* the (weighted) average of the uploaded vectors.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from fedsheaf.util.seeding import rng


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


def rows_per_rank(
    clients: Iterable[int], n_workers: int, placement: Mapping[int, int] | None = None
) -> list[int]:
    """How many of ``clients`` each rank 0..W holds (rank 0, the server: none).

    ``placement`` maps a client to the rank that holds its row (default: its home).
    """
    counts = [0] * (n_workers + 1)
    for c in clients:
        c = int(c)
        counts[placement[c] if placement is not None else client_rank(c, n_workers)] += 1
    return counts


def moves_clients(
    placement: str, n_workers: int, n_clients: int, per_round: int | None = None
) -> bool:
    """Whether ``placement`` may train a client away from its home rank.

    Only ``balanced`` or ``dynamic`` with ``1 < W < clients``, and fewer than all
    clients per round (``per_round``): one worker, one client per worker, or every
    client in every round (home ranks then hold as equal shares as any deal) leaves
    nothing to balance.
    """
    every = per_round is not None and per_round >= n_clients
    return placement in ("balanced", "dynamic") and 1 < n_workers < n_clients and not every


def dispatch_order(clients: Iterable[int], work: Sequence[float] | np.ndarray) -> list[int]:
    """``clients`` longest first (decreasing ``work[c]``), ties by client id.

    The order in which :func:`balanced_placement` deals clients, and the order in
    which the server hands them out under ``dynamic`` placement: longest first keeps
    the last, unpredictable gap short.
    """
    return sorted((int(c) for c in clients), key=lambda c: (-float(work[c]), c))


def balanced_placement(
    clients: Iterable[int], work: Sequence[float] | np.ndarray, n_workers: int
) -> dict[int, int]:
    """Deal ``clients`` to ranks 1..W, longest first, each to the least-loaded rank (LPT).

    ``work[c]`` is client ``c``'s local work (e.g. its training samples). Clients go
    in order of decreasing work, ties by client id; a client goes to the rank with
    the least work so far, ties to the lowest rank. The result depends only on the
    arguments, so every rank computes the same placement. The busiest rank gets at
    most ``Σ work / W + max work`` (and at most 4/3 of the best possible).

    Returns
    -------
    dict
        Client id -> rank (1..W).
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    ids = [int(c) for c in clients]
    if len(set(ids)) != len(ids):
        raise ValueError(f"clients must be distinct, got {ids}")
    order = dispatch_order(ids, work)
    loads = [(0.0, rank) for rank in range(1, n_workers + 1)]  # a heap: least load, then rank
    out: dict[int, int] = {}
    for c in order:
        load, rank = heapq.heappop(loads)
        out[c] = rank
        heapq.heappush(loads, (load + float(work[c]), rank))
    return out


def place_clients(
    clients: Iterable[int],
    n_workers: int,
    placement: str = "static",
    work: Sequence[float] | np.ndarray | None = None,
) -> dict[int, int]:
    """The rank that trains each of ``clients`` this round (client id -> rank 1..W).

    ``static``: the client's home rank; ``balanced``: :func:`balanced_placement`
    over ``work`` (needed then).
    """
    if placement == "static":
        return {int(c): client_rank(int(c), n_workers) for c in clients}
    if placement == "balanced":
        if work is None:
            raise ValueError("balanced placement needs every client's work")
        return balanced_placement(clients, work, n_workers)
    if placement == "dynamic":
        raise ValueError("dynamic placement is decided while the round runs, not ahead")
    raise ValueError(f"placement must be 'static', 'balanced' or 'dynamic', got {placement!r}")


def average(updates: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Mean of the rows of ``updates`` (k × P), weighted by ``weights`` when given.

    Sums in float64 in row order and returns float32; the caller fixes the row
    order (client id), so the result does not depend on how clients map to ranks.
    """
    return mean64(updates, weights).astype(np.float32)


def mean64(updates: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """:func:`average` before its cast to float32: the float64 mean, summed in row order."""
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
    return out
