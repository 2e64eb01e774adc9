"""Which pilots an agent encodes at each step, and how they become ``A_i`` (SPEC §2).

``sheaf.pilot_strategy``:

* ``uniform`` / ``stratified`` — K pilots per step from :class:`PilotStream`;
  ``A_i = f_i(x^k)`` column by column.
* ``prototype`` — one column per pilot class: the mean latent of
  ``sheaf.prototype_members`` seeded members of that class.
* ``kmeans`` — the same with K groups found by k-means on the (pooled) pilot inputs,
  identical on every rank.

``sheaf.parseval`` then replaces ``A_i`` by its polar factor ``A_i (A_iᵀA_i)^{-1/2}``.
Every rank builds the same plan from the run seed: the columns of all agents'
``A`` refer to the same inputs (or groups), in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from fedsheaf.config.sections import SheafConfig
from fedsheaf.sheaf.pilots import PilotStream, parseval
from fedsheaf.sheaf.prototypes import (
    PrototypeStream,
    class_groups,
    group_means,
    kmeans_groups,
    pooled_inputs,
)
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.seeding import derive_seed


class PilotPlan:
    """The per-step pilot matrix ``A_i`` (d_i × K) of one agent."""

    def __init__(self, sc: SheafConfig, seed: int, x_pilot: Tensor, y_pilot: Tensor | None) -> None:
        self.strategy, self.parseval = sc.pilot_strategy, sc.parseval
        n = len(x_pilot)
        if n == 0:
            raise ConfigError("the shared pilot set is empty; raise data.pilot_fraction")
        labels = None if y_pilot is None else y_pilot.detach().cpu().numpy()
        stream_seed = derive_seed(seed, "pilots")  # no agent id: the same on every rank
        self.stream: PilotStream | PrototypeStream
        if self.strategy in ("uniform", "stratified"):
            if self.strategy == "stratified" and labels is None:
                raise ConfigError("sheaf.pilot_strategy=stratified needs the pilot labels")
            self.stream = PilotStream(stream_seed, n, min(sc.pilot_batch, n), self.strategy, labels)
            self.columns = self.stream.batch
        else:
            if self.strategy == "prototype":
                if labels is None:
                    raise ConfigError("sheaf.pilot_strategy=prototype needs the pilot labels")
                groups = class_groups(labels)
            else:
                k = min(sc.pilot_batch, n)
                groups = kmeans_groups(pooled_inputs(x_pilot), k, derive_seed(seed, "kmeans"))
            self.stream = PrototypeStream(groups, sc.prototype_members, stream_seed)
            self.columns = self.stream.n_groups

    def indices(self, epoch: int, step: int) -> np.ndarray:
        """Positions into the pilot pool encoded at ``(epoch, step)``."""
        return self.stream.indices(epoch, step)

    def matrix(self, features: Tensor) -> Tensor:
        """``A_i`` (d × K) from the latents ``(n, d)`` of :meth:`indices`' inputs."""
        if isinstance(self.stream, PrototypeStream):
            features = group_means(features, self.stream.n_groups)
        a = features.T
        return parseval(a) if self.parseval else a

    def features(
        self, encode: Callable[[Tensor], Tensor], x_pilot: Tensor, epoch: int, step: int
    ) -> Tensor:
        """Encode this step's pilots with ``encode`` and return ``A_i`` (differentiable)."""
        idx = torch.as_tensor(self.indices(epoch, step), device=x_pilot.device)
        return self.matrix(encode(x_pilot[idx]))
