"""The per-phase timer inside the real training loop: it sees every phase, changes nothing."""

from __future__ import annotations

from typing import Any

import torch

from fedsheaf.algorithms import DECENTRALIZED
from fedsheaf.algorithms.base import Agent, Arrived, DecentralizedAlgorithm
from fedsheaf.config.sections import load_config
from fedsheaf.ops.bench.rank_tools import NoNeighbours, Silent
from fedsheaf.runtime import experiment
from fedsheaf.util.timers import NULL_TIMER, PhaseTimer

torch.set_num_threads(1)


class OneNeighbour:
    """Agent 1, answering every pilot matrix with a fixed ``A_1``."""

    neighbours = [1]

    def __init__(self, a_j: torch.Tensor) -> None:
        self.a_j = a_j

    def start_exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> Arrived:
        return Arrived([self.a_j.clone()])

    def exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        return self.start_exchange(mat).wait()

    def take_round_bytes(self) -> dict[int, int]:
        return {}


def build(algorithm: str, *overrides: str, nbr: Any = None) -> DecentralizedAlgorithm:
    cfg = load_config(
        "configs/quickstart.yaml",
        [f"algorithm={algorithm}", "train.steps_per_epoch=3", *overrides],
    )
    graph = experiment.build_graph(cfg, 4)
    ds, part = experiment.load_and_partition(cfg)
    device = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, device)
    model = experiment.agent_model(cfg, ds, 0, device)
    agent = Agent(0, cfg, graph, data, model, device, 3)
    return DECENTRALIZED[algorithm](agent, nbr or NoNeighbours(), Silent())


def one_epoch(algo: DecentralizedAlgorithm) -> float:
    loss = algo.train_epoch(0)
    algo.end_epoch(0)
    return loss


def test_timer_sees_every_phase_and_changes_nothing() -> None:
    plain, timed = build("sheaf_frl"), build("sheaf_frl")
    assert plain.timer is NULL_TIMER
    timer = PhaseTimer()
    timed.timer = timer
    assert one_epoch(plain) == one_epoch(timed)
    theirs = timed.model.state_dict()
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, theirs[name]), name
    per_step = {"data", "forward", "pilot_forward", "exchange", "maps", "penalty", "backward"}
    assert per_step | {"optimizer"} == set(timer.counts)
    assert all(timer.counts[p] == 3 for p in per_step - {"maps", "exchange"})
    assert timer.counts["exchange"] == 2 * 3  # posting, then waiting, every step
    assert timer.counts["maps"] == 3 + 1  # every step, plus the refresh at the epoch's end
    assert all(s >= 0.0 for s in timer.totals().values())


def test_overlapped_steps_time_two_backward_passes() -> None:
    a_j = torch.randn(24, 32, generator=torch.Generator().manual_seed(0))  # agent 1: d = 24
    algo = build("sheaf_frl", "sheaf.overlap_exchange=true", nbr=OneNeighbour(a_j))
    algo.timer = timer = PhaseTimer()
    passes = []
    for p in algo.model.encoder.parameters():  # reached by both passes
        p.register_hook(lambda g, passes=passes: passes.append(1))
        break
    one_epoch(algo)
    assert timer.counts["backward"] == 2 * 3  # the private batch, then the penalty
    assert timer.counts["exchange"] == 2 * 3  # posting, then waiting
    assert len(passes) == 2 * 3


def test_independent_training_has_no_sheaf_phases() -> None:
    algo = build("noncoop")
    algo.timer = timer = PhaseTimer()
    one_epoch(algo)
    assert set(timer.counts) == {"data", "forward", "backward", "optimizer"}
