"""Sheaf-FMTL's end-of-epoch sheaf step on a real agent uses that agent's learning rate."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from fedsheaf.algorithms.base import Agent
from fedsheaf.algorithms.sheaf_fmtl import SheafFMTL
from fedsheaf.config.sections import load_config
from fedsheaf.ops.bench.rank_tools import Silent
from fedsheaf.runtime import experiment


class SilentNeighbour:
    """One neighbour of agent 0 with a model of the same size whose messages are zero."""

    neighbours = [1]

    def exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        return [mat.detach().clone()]  # the parameter count: the same as ours

    def exchange_each(self, mats: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        return [torch.zeros_like(m) for m in mats]

    def take_round_bytes(self) -> dict[int, int]:
        return {}


def build(overrides: list[str]) -> SheafFMTL:
    cfg = load_config("configs/quickstart.yaml", ["algorithm=sheaf_fmtl", *overrides])
    graph = experiment.build_graph(cfg, 4)
    ds, part = experiment.load_and_partition(cfg)
    cpu = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, cpu)
    agent = Agent(0, cfg, graph, data, experiment.agent_model(cfg, ds, 0, cpu), cpu, 3)
    return SheafFMTL(agent, SilentNeighbour(), Silent())


@pytest.mark.parametrize(("overrides", "alpha"), [([], 0.05), (["agents[0].lr=0.2"], 0.2)])
def test_theta_step_uses_the_agents_lr(overrides: list[str], alpha: float) -> None:
    algo = build(["train.lr=0.05", "sheaf.lam=0.5", *overrides])
    assert algo.lr == alpha
    theta = parameters_to_vector(algo.params).detach().clone()
    (p,) = algo.fmtl_maps.values()
    algo.end_epoch(0)
    expect = theta - alpha * 0.5 * (p.T @ (p @ theta))  # zero message from the neighbour
    torch.testing.assert_close(parameters_to_vector(algo.params), expect)
