"""``sheaf.overlap_exchange``: the private batch is back-propagated while the pilots travel.

The order of one training step is observed through a stand-in neighbourhood whose
posted exchange records when it is waited for, and a gradient hook on the head (only
the private loss reaches it). Equality of whole runs with and without overlap, on
real ranks, is in ``tests/mpi/test_variants.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedsheaf.algorithms.base import Agent
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.config.sections import load_config
from fedsheaf.ops.bench.rank_tools import Silent
from fedsheaf.runtime import experiment

torch.set_num_threads(1)


class Recorded:
    """A posted exchange that logs the moment it is waited for."""

    def __init__(self, log: list[str], answer: list[torch.Tensor]) -> None:
        self.log, self.answer = log, answer

    def wait(self) -> list[torch.Tensor]:
        self.log.append("wait")
        return self.answer


class LoggingNeighbour:
    """Agent 0 with one neighbour (agent 1) that always answers with a fixed ``A_1``."""

    neighbours = [1]

    def __init__(self, a_j: torch.Tensor, log: list[str]) -> None:
        self.a_j, self.log = a_j, log

    def start_exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> Recorded:
        self.log.append("post")
        return Recorded(self.log, [self.a_j.clone()])

    def exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> list[torch.Tensor]:
        return self.start_exchange(mat, shapes, device).wait()

    def take_round_bytes(self) -> dict[int, int]:
        return {}


class SharedRankNeighbour(LoggingNeighbour):
    """The same neighbour, on a rank shared with other agents (the runtime's AgentPort)."""

    meets_other_agents = True


def build(steps: int, *overrides: str, shared: bool = False) -> tuple[SheafFRL, list[str]]:
    cfg = load_config("configs/quickstart.yaml", [f"train.steps_per_epoch={steps}", *overrides])
    graph = experiment.build_graph(cfg, 4)
    ds, part = experiment.load_and_partition(cfg)
    device = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, device)
    model = experiment.agent_model(cfg, ds, 0, device)
    gen = torch.Generator().manual_seed(3)
    a_j = torch.randn(graph.dims[1], cfg.sheaf.pilot_batch, generator=gen)
    log: list[str] = []
    nbr = (SharedRankNeighbour if shared else LoggingNeighbour)(a_j, log)
    return SheafFRL(Agent(0, cfg, graph, data, model, device, steps), nbr, Silent()), log


def step_order(*overrides: str, shared: bool = False) -> list[str]:
    algo, log = build(1, *overrides, shared=shared)
    # only the private loss reaches the head's last bias
    list(algo.model.head.parameters())[-1].register_hook(lambda g: log.append("private backward"))
    algo.train_epoch(0)
    return log


@pytest.mark.parametrize(
    ("overrides", "order"),
    [
        (("sheaf.overlap_exchange=true",), ["post", "private backward", "wait"]),
        ((), ["post", "wait", "private backward"]),  # the default: one backward of CE + R
        (
            ("sheaf.overlap_exchange=true", "sheaf.fused_pilots=true"),
            ["post", "wait", "private backward"],
        ),
    ],
)
def test_private_backward_runs_while_the_pilots_travel(overrides, order) -> None:
    assert step_order(*overrides) == order


def test_overlapped_training_is_bitwise_the_blocking_one() -> None:
    """Two backward passes (CE, then R) leave the same gradients as one of CE + R."""
    states, losses = [], []
    for overlap in ("false", "true"):
        algo, _ = build(4, f"sheaf.overlap_exchange={overlap}", "sheaf.map_refresh=step")
        losses.append([algo.train_epoch(e) for e in range(2)])
        states.append(algo.model.state_dict())
    assert losses[0] == losses[1]
    for name, value in states[0].items():
        assert torch.equal(value, states[1][name]), name


@pytest.mark.parametrize(
    ("overrides", "order"),
    [
        ((), ["post", "private backward", "wait"]),
        (("sheaf.recompute_pilots=true",), ["post", "private backward", "wait"]),
        (("sheaf.fused_pilots=true",), ["post", "wait", "private backward"]),
    ],
)
def test_agents_sharing_a_rank_back_propagate_before_they_meet(overrides, order) -> None:
    """On a shared rank the private batch's graph is gone before the agents meet (only
    the pilot graph is held, or with recompute_pilots none)."""
    assert step_order(*overrides, shared=True) == order


def test_a_shared_rank_trains_bitwise_as_a_rank_of_its_own() -> None:
    """Back-propagating first, and recomputing the pilot forward after the exchange from
    the state it started in (BatchNorm statistics, dropout generator), change no bit."""
    states, losses = [], []
    for shared, recompute in ((False, "false"), (True, "false"), (True, "true")):
        algo, _ = build(
            4, f"sheaf.recompute_pilots={recompute}", "sheaf.map_refresh=step", shared=shared
        )
        losses.append([algo.train_epoch(e) for e in range(2)])
        states.append(algo.model.state_dict())
    assert losses[0] == losses[1] == losses[2]
    for state in states[1:]:
        for name, value in states[0].items():
            assert torch.equal(value, state[name]), name
