"""Many clients on few ranks (target 4): FedRep round time against its ideal.

The real round loop (:class:`~fedsheaf.runtime.server_launch.Rounds`) runs with two
stopwatches added: every client's local update on its worker, and the server's
averaging. Per round the ideal is ``Σ_{c ∈ S_t} t_c / W + t_avg`` (the sampled clients'
training spread perfectly over the W workers, then the average); the measured round
time is the server's ``train_seconds`` (sampling broadcast to the new parameters'
broadcast, evaluation excluded). Two bounds explain the gap: the busiest rank's share
under the static placement ``rank = 1 + c mod W`` (SPEC §4), and under a balanced one.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.protocol import hosted_clients
from fedsheaf.algorithms.federated.setup import build_model, check_setup, load_clients
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.bench.formulas import (
    balanced_makespan,
    ideal_round_seconds,
    ratio,
    static_makespan,
    summary,
)
from fedsheaf.bench.ranks import sync
from fedsheaf.config import load_config
from fedsheaf.runtime.server_launch import Rounds
from fedsheaf.runtime.star import Star
from fedsheaf.runtime.world import World


class TimedRunner(ClientRunner):
    """A client runner that records ``(round, client, seconds)`` of every local update."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[tuple[int, int, float]] = []

    def local_update(
        self, client: int, shared: np.ndarray, round_: int
    ) -> tuple[np.ndarray, float]:
        device = next(self.model.parameters()).device
        sync(device)
        start = time.perf_counter()
        out = super().local_update(client, shared, round_)
        sync(device)
        self.times.append((round_, client, time.perf_counter() - start))
        return out


class TimedRounds(Rounds):
    """The round loop with the server's averaging timed (one entry per round)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.average_seconds: list[float] = []

    def _aggregate(self, vecs: np.ndarray, info: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        out = super()._aggregate(vecs, info)
        self.average_seconds.append(time.perf_counter() - start)
        return out


def round_rows(
    history: list[dict[str, Any]],
    client_times: dict[tuple[int, int], float],
    average_seconds: list[float],
    n_workers: int,
) -> list[dict[str, Any]]:
    """Per training round: measured time, ideal, and the placement bounds."""
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
    return rows


def clients(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    cfg = world.agree(lambda: load_config(spec["config"], list(spec["overrides"])))
    fc = cfg.federated
    world.agree(lambda: check_setup(cfg, world.size))
    algorithm = FEDERATED[cfg.algorithm](fc)
    star = Star(world.comm)
    mine = hosted_clients(world.rank, fc.clients, star.n_workers)
    device = torch.device("cpu") if world.is_root else world.device
    data = world.agree(lambda: load_clients(cfg, mine, device))
    runner = TimedRunner(algorithm, build_model(cfg), data, cfg.train, fc.augment, cfg.seed, device)
    rounds = TimedRounds(cfg, star, runner, None)
    history = rounds.run()
    gathered = world.gather(runner.times)
    if not world.is_root or gathered is None:
        return None
    client_times = {(t, c): s for rows in gathered for t, c, s in rows}
    rows = round_rows(history, client_times, rounds.average_seconds, star.n_workers)
    steady = rows[1:] if len(rows) > 1 else rows  # round 1 pays for warm-up
    med = {
        key: statistics.median(r[key] for r in steady)
        for key in ("measured", "ideal", "static_placement", "balanced_placement")
    }
    return {
        "label": spec["label"],
        "config": spec["config"],
        "overrides": spec["overrides"],
        "algorithm": cfg.algorithm,
        "clients": fc.clients,
        "sampled_per_round": len(history[0]["selected"]),
        "workers": star.n_workers,
        "rounds": rows,
        "median": med,
        "ratio": summary([r["ratio"] for r in steady]),
        "ratio_static_bound": ratio(med["static_placement"], med["ideal"]),
        "ratio_balanced_bound": ratio(med["balanced_placement"], med["ideal"]),
        "client_seconds": summary(list(client_times.values())),
    }


CASES = {"clients": clients}
