"""The benchmark's closed forms and statistics (pure: no MPI, no torch, no clock).

* Bytes on the wire per training step, from the graph alone (SPEC §2): standard
  Sheaf-FRL, its strict-privacy variant, and what FedAvg would move for the same models.
* The ideal round time of a server-based run, and the round times that static and
  balanced client placement allow and that the placement used gave (:func:`round_rows`
  puts them side by side per round).
* Medians and ratios of repeated timings, the A B / B A order of repeats, and the
  per-phase table of a profiled epoch.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from fedsheaf.graphs import Graph

__all__ = [
    "FLOAT32",
    "alternate",
    "balanced_makespan",
    "fedavg_bytes_per_step",
    "ideal_round_seconds",
    "phase_table",
    "placed_makespan",
    "pilot_bytes_by_agent",
    "pilot_bytes_per_step",
    "ratio",
    "round_rows",
    "static_makespan",
    "strict_bytes_by_agent",
    "strict_bytes_per_step",
    "summary",
]

FLOAT32 = 4
T = TypeVar("T")


def pilot_bytes_by_agent(graph: Graph, k: int, itemsize: int = FLOAT32) -> list[int]:
    """Bytes agent i sends per step in standard Sheaf-FRL: ``|N(i)| · d_i · K · itemsize``.

    Agent i sends its own pilot matrix ``A_i`` (d_i × K) to every neighbour.
    """
    return [graph.degree(i) * graph.dims[i] * k * itemsize for i in range(graph.n)]


def pilot_bytes_per_step(graph: Graph, k: int, itemsize: int = FLOAT32) -> int:
    """``Σ_i |N(i)| · d_i · K · itemsize``: the whole network's pilot traffic per step."""
    return sum(pilot_bytes_by_agent(graph, k, itemsize))


def strict_bytes_by_agent(graph: Graph, k: int, itemsize: int = FLOAT32) -> list[int]:
    """Bytes agent i sends per step in strict-privacy mode (SPEC §2, Variants).

    To each j ∈ N(i)⁻ (i is the head) it sends ``O_ji A_i``: d_i · K floats; to each
    j ∈ N(i)⁺ (j is the head) it sends ``V_ji A_i``: d_j · K floats.
    """
    out = []
    for i in range(graph.n):
        floats = sum(graph.dims[i] for _ in graph.tails(i)) + sum(
            graph.dims[j] for j in graph.heads(i)
        )
        out.append(floats * k * itemsize)
    return out


def strict_bytes_per_step(graph: Graph, k: int, itemsize: int = FLOAT32) -> int:
    """Network total of :func:`strict_bytes_by_agent` (= Σ_edges 2 · max(d_i, d_j) · K · 4)."""
    return sum(strict_bytes_by_agent(graph, k, itemsize))


def fedavg_bytes_per_step(param_counts: Sequence[int], itemsize: int = FLOAT32) -> int:
    """What FedAvg moves per communication round for these models: ``Σ_i 2 · P_i · itemsize``.

    Every client uploads its whole model and downloads the average (one local step per
    round, the same cadence as Sheaf-FRL's one exchange per step).
    """
    return sum(2 * int(p) * itemsize for p in param_counts)


def ideal_round_seconds(
    client_seconds: Iterable[float], n_workers: int, server_seconds: float
) -> float:
    """``Σ_c t_c / W + t_server``: the sampled clients' training spread perfectly over W."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    return sum(client_seconds) / n_workers + server_seconds


def static_makespan(client_seconds: Mapping[int, float], n_workers: int) -> float:
    """Busiest rank's training time when client c lives on rank ``1 + c mod W`` (SPEC §4)."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    load = [0.0] * n_workers
    for c, t in client_seconds.items():
        load[int(c) % n_workers] += t
    return max(load)


def balanced_makespan(client_seconds: Iterable[float], n_workers: int) -> float:
    """Busiest rank's time when clients go, longest first, to the least-loaded rank (LPT)."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    heap = [0.0] * n_workers
    for t in sorted(client_seconds, reverse=True):
        heapq.heappush(heap, heapq.heappop(heap) + t)
    return max(heap)


def placed_makespan(client_seconds: Mapping[int, float], ranks: Mapping[int, int]) -> float:
    """Busiest rank's training time when client c trained on rank ``ranks[c]``."""
    load: dict[int, float] = {}
    for c, t in client_seconds.items():
        load[ranks[c]] = load.get(ranks[c], 0.0) + t
    return max(load.values(), default=0.0)


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and count of repeated measurements (None when there are none)."""
    xs = [float(x) for x in samples]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


def phase_table(per_rank: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean and max over ranks of each phase's seconds per step."""
    names = sorted({k for r in per_rank for k in r})
    return {
        k: {
            "mean": statistics.fmean(r.get(k, 0.0) for r in per_rank),
            "max": max(r.get(k, 0.0) for r in per_rank),
        }
        for k in names
    }


def alternate(names: Sequence[T], repeats: int) -> list[list[T]]:
    """The order of each repeat: A B, B A, A B, … (ABBA pairs cancel linear drifts)."""
    return [list(names) if r % 2 == 0 else list(names)[::-1] for r in range(repeats)]


def measure_alternating(
    names: Sequence[T], repeats: int, measure: Callable[[T], float]
) -> dict[T, list[float]]:
    """A warm-up ``measure`` per name, then ``repeats`` rounds in :func:`alternate` order."""
    for name in names:
        measure(name)
    samples: dict[T, list[float]] = {name: [] for name in names}
    for order in alternate(names, repeats):
        for name in order:
            samples[name].append(measure(name))
    return samples


def round_rows(
    history: list[dict[str, Any]],
    client_times: dict[tuple[int, int], float],
    average_seconds: list[float],
    n_workers: int,
    ranks: Mapping[tuple[int, int], int] | None = None,
) -> list[dict[str, Any]]:
    """Per training round: measured time, ideal, and the placement bounds.

    ``ranks[(round, client)]`` (0-based round), where the client actually trained,
    adds ``placed``: the busiest rank's time under that placement plus the average.
    """
    rows = []
    for t, record in enumerate(r for r in history if not r["final"]):
        times = {c: client_times[(t, c)] for c in record["selected"]}
        avg = average_seconds[t] if t < len(average_seconds) else 0.0
        ideal = ideal_round_seconds(times.values(), n_workers, avg)
        rows.append(
            {
                "round": t + 1,
                "measured": record["train_seconds"],
                "ideal": ideal,
                "ratio": ratio(record["train_seconds"], ideal),
                "client_seconds_sum": sum(times.values()),
                "average_seconds": avg,
                "static_placement": static_makespan(times, n_workers) + avg,
                "balanced_placement": balanced_makespan(times.values(), n_workers) + avg,
            }
        )
        if ranks is not None:
            where = {c: ranks[(t, c)] for c in times}
            rows[-1]["placed"] = placed_makespan(times, where) + avg
    return rows
