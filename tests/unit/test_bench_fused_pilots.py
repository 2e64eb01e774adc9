"""``sheaf.fused_pilots``: one encoder call for the private batch and the pilots.

With per-sample layers (BatchNorm and whitening on running statistics, no dropout) the
fused step is the same function as the separate one, so losses and gradients agree;
in training mode the only difference is that normalisation layers see the union's
batch statistics once per step instead of each batch's statistics separately.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedsheaf.algorithms.base import Agent, Arrived
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.config.sections import load_config
from fedsheaf.ops.bench.rank_tools import Silent
from fedsheaf.runtime import experiment

torch.set_num_threads(1)


class OneNeighbour:
    """Agent 0's exchange with a single neighbour (agent 1) that always sends ``a_j``."""

    neighbours = [1]

    def __init__(self, a_j: torch.Tensor) -> None:
        self.a_j = a_j

    def exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> list[torch.Tensor]:
        assert tuple(mat.shape) == (16, self.a_j.shape[1])
        return [self.a_j.clone()]

    def exchange_each(self, mats: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        raise NotImplementedError

    def start_exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> Arrived:
        return Arrived(self.exchange(mat, shapes, device))

    def start_exchange_each(self, mats: Any, shapes: Any = None, device: Any = None) -> Arrived:
        raise NotImplementedError

    def take_round_bytes(self) -> dict[int, int]:
        return {}


def build(fused: bool) -> SheafFRL:
    cfg = load_config(
        "configs/quickstart.yaml",
        [f"sheaf.fused_pilots={str(fused).lower()}", "train.steps_per_epoch=3"],
    )
    graph = experiment.build_graph(cfg, 4)
    ds, part = experiment.load_and_partition(cfg)
    device = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, device)
    model = experiment.agent_model(cfg, ds, 0, device)
    a_j = torch.randn(
        graph.dims[1], cfg.sheaf.pilot_batch, generator=torch.Generator().manual_seed(1)
    )
    return SheafFRL(Agent(0, cfg, graph, data, model, device, 3), OneNeighbour(a_j), Silent())


def step_loss(algo: SheafFRL, epoch: int, step: int) -> torch.Tensor:
    """The loss of one step as the base loop builds it (task loss, then the regulariser)."""
    d = algo.agent.data
    algo._next_step = (epoch, step)
    task = algo.task_loss(d.x_train[:32], d.y_train[:32])
    extra = algo.regulariser(epoch, step)
    loss = task + (extra() if callable(extra) else extra)
    algo.model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("step", [0, 5])
def test_fused_equals_separate_with_per_sample_layers(step: int) -> None:
    separate, fused = build(False), build(True)
    separate.model.eval()  # running statistics, no dropout: every layer acts per sample
    fused.model.eval()
    a, b = step_loss(separate, 2, step), step_loss(fused, 2, step)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert fused._fused is None  # the stashed pilot latents were used by the regulariser
    grads_b = dict(fused.model.named_parameters())
    for name, p in separate.model.named_parameters():
        torch.testing.assert_close(p.grad, grads_b[name].grad, rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(separate.maps[1], fused.maps[1], rtol=1e-5, atol=1e-6)


def test_fused_epoch_encodes_once_per_step_and_updates_statistics_once() -> None:
    calls = {}
    for fused in (False, True):
        algo = build(fused)
        n = [0]
        algo.model.encoder.register_forward_hook(lambda *_, n=n: n.__setitem__(0, n[0] + 1))
        loss = algo.train_epoch(0)
        algo.end_epoch(0)
        assert torch.isfinite(torch.tensor(loss))
        bn = algo.model.encoder.blocks[0].bn
        calls[fused] = (n[0], int(bn.num_batches_tracked))
    assert calls[False] == (6, 6)  # private batch and pilots: two calls per step
    assert calls[True] == (3, 3)


def test_fused_uses_the_same_pilots_as_separate() -> None:
    seen = {}
    for fused in (False, True):
        algo = build(fused)
        cols = []
        original = algo.pilots.matrix
        algo.pilots.matrix = lambda f, cols=cols, original=original: (  # record K per step
            cols.append(f.shape[0]) or original(f)
        )
        idx = []
        indices = algo.pilots.indices
        algo.pilots.indices = lambda e, s, idx=idx, indices=indices: (
            idx.append((e, s)) or indices(e, s)
        )
        algo.train_epoch(1)
        seen[fused] = (idx, cols)
    assert seen[False] == seen[True] == ([(1, 0), (1, 1), (1, 2)], [32, 32, 32])
