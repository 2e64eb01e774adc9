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

from fedsheaf import experiment
from fedsheaf.algorithms.base import Agent
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.bench.ranks import Silent
from fedsheaf.config import load_config

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


def step_order(*overrides: str) -> list[str]:
    cfg = load_config("configs/quickstart.yaml", ["train.steps_per_epoch=1", *overrides])
    graph = experiment.build_graph(cfg, 4)
    ds, part = experiment.load_and_partition(cfg)
    device = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, device)
    model = experiment.agent_model(cfg, ds, 0, device)
    a_j = torch.randn(graph.dims[1], cfg.sheaf.pilot_batch, generator=torch.Generator())
    log: list[str] = []
    nbr = LoggingNeighbour(a_j, log)
    algo = SheafFRL(Agent(0, cfg, graph, data, model, device, 1), nbr, Silent())
    # only the private loss reaches the head's last bias
    list(model.head.parameters())[-1].register_hook(lambda g: log.append("private backward"))
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
