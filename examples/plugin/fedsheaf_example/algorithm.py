"""A decentralized algorithm plug-in: the non-cooperative baseline with label smoothing.

fedsheaf builds one on every rank as ``factory(agent, nbr, reporter, **algorithm_args)``;
a subclass of a built-in algorithm overrides only the hook it changes (here
``task_loss``; the others are listed in docs/extending.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import Agent, Exchange, Reporter
from fedsheaf.algorithms.noncoop import NonCooperative

__all__ = ["SmoothedNonCooperative"]


class SmoothedNonCooperative(NonCooperative):
    """``noncoop`` (independent training, post-hoc maps for communication accuracy) with
    a label-smoothed cross-entropy; ``algorithm_args: {smoothing: 0.1}``."""

    name = "example_smooth_noncoop"

    def __init__(
        self, agent: Agent, nbr: Exchange, reporter: Reporter, *, smoothing: float = 0.1
    ) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        super().__init__(agent, nbr, reporter)
        self.smoothing = smoothing

    def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x), y, label_smoothing=self.smoothing)
