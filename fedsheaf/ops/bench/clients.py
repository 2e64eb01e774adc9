"""Many clients on few ranks (target 4): FedRep round time against its ideal.

The real round loop (:class:`~fedsheaf.launch.server.Rounds`) runs with two
stopwatches added: every client's local update on its worker, and the server's
averaging. Per round the ideal is ``Σ_{c ∈ S_t} t_c / W + t_avg`` (the sampled clients'
training spread perfectly over the W workers, then the average); the measured round
time is the server's ``train_seconds`` (sampling broadcast to the new parameters'
broadcast, evaluation excluded). Three bounds explain the gap, each the busiest rank's
training plus the average: under the placement the run used (``federated.placement``,
dynamic by default: longest first to whichever worker is free; balanced: longest
first to the least-loaded worker by training samples),
under the static placement ``rank = 1 + c mod W`` (SPEC §4), and under a balanced one
that knew the measured times. With equal clients no placement beats
``⌈m/W⌉ / (m/W)`` × ideal for m sampled clients (1.2 for 10 clients on 4 workers).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.config.sections import load_config
from fedsheaf.launch.server import PLUMBING, Rounds, build_runner, moves
from fedsheaf.ops.bench.formulas import ratio, round_rows, summary
from fedsheaf.ops.bench.rank_tools import sync
from fedsheaf.runtime.star import Star
from fedsheaf.runtime.world import World


def time_local_updates(runner: Any, device: torch.device) -> list[tuple[int, int, float]]:
    """Make ``runner.local_update`` record ``(round, client, seconds)``; returns the record."""
    times: list[tuple[int, int, float]] = []
    update = runner.local_update

    def timed(client: int, shared: np.ndarray, round_: int) -> Any:
        sync(device)
        start = time.perf_counter()
        out = update(client, shared, round_)
        sync(device)
        times.append((round_, client, time.perf_counter() - start))
        return out

    runner.local_update = timed
    return times


class TimedRounds(Rounds):
    """The round loop with the server's averaging timed (one entry per round)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.average_seconds: list[float] = []

    def _aggregate(
        self, w: np.ndarray, vecs: np.ndarray, info: np.ndarray, round_: int
    ) -> np.ndarray:
        start = time.perf_counter()
        out = super()._aggregate(w, vecs, info, round_)
        self.average_seconds.append(time.perf_counter() - start)
        return out


def _placement_bytes(record: dict[str, Any]) -> int:
    """Bytes of a round's placement exchanges (not federated traffic)."""
    return sum(v for k, v in record["bytes"].items() if k.startswith(PLUMBING))


def clients(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    cfg = world.agree(lambda: load_config(spec["config"], list(spec["overrides"])))
    fc = cfg.federated
    algorithm = FEDERATED[cfg.algorithm](fc)
    task = algorithm.make_task(cfg)  # as fedsheaf.launch.server does
    world.agree(lambda: task.check(world.size))
    star = Star(world.comm)
    runner = build_runner(cfg, world, task, star)
    device = next(runner.model.parameters()).device
    times = time_local_updates(runner, device)
    rounds = TimedRounds(cfg, star, runner, None, task)
    history = rounds.run()
    star.close()
    gathered = world.gather(times)
    if not world.is_root or gathered is None:
        return None
    client_times = {(t, c): s for rows in gathered for t, c, s in rows}
    trained_on = {(t, c): rank for rank, rows in enumerate(gathered) for t, c, _ in rows}
    rows = round_rows(history, client_times, rounds.average_seconds, star.n_workers, trained_on)
    steady = rows[1:] if len(rows) > 1 else rows  # round 1 pays for warm-up
    med = {
        key: statistics.median(r[key] for r in steady)
        for key in ("measured", "ideal", "placed", "static_placement", "balanced_placement")
    }
    moved = moves(cfg, star.n_workers)
    return {
        "label": spec["label"],
        "config": spec["config"],
        "overrides": spec["overrides"],
        "algorithm": cfg.algorithm,
        "clients": fc.clients,
        "sampled_per_round": len(history[0]["selected"]),
        "workers": star.n_workers,
        "placement": fc.placement if moved else "static",
        "rounds": rows,
        "median": med,
        "ratio": summary([r["ratio"] for r in steady]),
        "ratio_placed_bound": ratio(med["placed"], med["ideal"]),
        "ratio_static_bound": ratio(med["static_placement"], med["ideal"]),
        "ratio_balanced_bound": ratio(med["balanced_placement"], med["ideal"]),
        "client_seconds": summary(list(client_times.values())),
        "placement_bytes": summary([_placement_bytes(r) for r in history if not r["final"]]),
    }


CASES = {"clients": clients}
