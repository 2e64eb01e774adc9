"""Sheaf-FRL (SPEC §2, Algorithm 1): pilot exchange, closed-form maps, sheaf penalty.

Per step: ``A_i = encoder(pilot batch)`` → ``nbr.start_exchange(A_i)`` posts it to
the neighbours → (``sheaf.overlap_exchange``: the base loop back-propagates the
private batch meanwhile) → every neighbour's ``A_j`` arrives → maps of incident edges
(refreshed per step, or fitted once per epoch from the pilot window) →
``sheaf_penalty`` joins the task loss (overlapped: is back-propagated on its own,
which leaves the same gradient sum).

Which pilots make up ``A_i`` (uniform, stratified, prototypes, Parseval) is
decided by :class:`~fedsheaf.algorithms.sheaf_frl_pilots.PilotPlan`; the
homogeneous and strict-privacy variants live in ``sheaf_frl_variants``.
``sheaf.fused_pilots`` encodes the private batch and the pilots in one encoder call
(:meth:`SheafFRL.task_loss`); results/bench/README.md has its speed and accuracy.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import (
    Agent,
    AgentData,
    DecentralizedAlgorithm,
    Exchange,
    Pending,
    Regulariser,
    Reporter,
)
from fedsheaf.algorithms.sheaf_frl_pilots import PilotPlan
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.models.seeded import ForwardState
from fedsheaf.sheaf.maps import PilotWindow, stiefel_map, window_batches
from fedsheaf.sheaf.penalty import agent_lambda, sheaf_penalty


class SheafFRL(DecentralizedAlgorithm):
    name = "sheaf_frl"

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        super().__init__(agent, nbr, reporter)
        sc, dims = self.cfg.sheaf, agent.graph.dims
        self.lam_i = agent_lambda(sc.lam, dims[agent.id])
        # Built from the run seed only: every agent encodes the same pilots.
        self.pilots = PilotPlan(sc, self.cfg.seed, agent.data.x_pilot, agent.data.y_pilot)
        self.recv_shapes = [(dims[j], self.pilots.columns) for j in nbr.neighbours]
        self.maps: dict[int, torch.Tensor] = {}
        self.window = PilotWindow(batches=window_batches(sc.window, self.pilots.columns))

    @classmethod
    def check(cls, cfg: ExperimentConfig, data: AgentData) -> None:
        PilotPlan(cfg.sheaf, cfg.seed, data.x_pilot, data.y_pilot)

    def pilot_matrix(self, epoch: int, step: int) -> torch.Tensor:
        """This step's ``A_i`` (d_i × K), differentiable w.r.t. the encoder."""
        fused, self._fused = self._fused, None
        self._next_step = (epoch, step + 1)
        if fused is not None and fused[0] == (epoch, step):
            return fused[1]
        return self.pilots.features(self.model.encode, self.agent.data.x_pilot, epoch, step)

    # ---- sheaf.fused_pilots: one encoder call for the private batch and the pilots ----
    _fused: tuple[tuple[int, int], torch.Tensor] | None = None
    _next_step: tuple[int, int] = (0, 0)

    def train_epoch(self, epoch: int) -> float:
        self._next_step = (epoch, 0)
        return super().train_epoch(epoch)

    def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if not self.cfg.sheaf.fused_pilots:
            return super().task_loss(x, y)
        epoch, step = self._next_step
        x_pilot = self.agent.data.x_pilot
        idx = torch.as_tensor(self.pilots.indices(epoch, step), device=x_pilot.device)
        z = self.model.encode(torch.cat([x, x_pilot[idx]]))
        self._fused = ((epoch, step), self.pilots.matrix(z[len(x) :]))  # for pilot_matrix
        return F.cross_entropy(self.model.decode(z[: len(x)]), y)

    def _head_tail(
        self, j: int, a_own: torch.Tensor, a_j: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return (a_own, a_j) if self.is_head[j] else (a_j, a_own)

    def regulariser(self, epoch: int, step: int) -> Regulariser:
        timer, sc = self.timer, self.cfg.sheaf
        meets = getattr(self.nbr, "meets_other_agents", False)
        # (sheaf.recompute_pilots: the pass is repeated after the exchange, from the state
        # it started in, so the rank holds no pilot graph while its agents meet)
        recompute = meets and sc.recompute_pilots and not sc.fused_pilots and self.nbr.neighbours
        again = ForwardState(self.model) if recompute else None
        with timer("pilot_forward"), torch.set_grad_enabled(again is None):
            a_own = self.pilot_matrix(epoch, step)
        with timer("exchange"):
            pending = self.send_pilots(a_own.detach())

        def finish() -> torch.Tensor:
            nonlocal a_own
            with timer("exchange"):
                received = pending.wait()
            if again is not None:
                with timer("pilot_forward"):
                    again.restore()
                    a_own = self.pilots.features(
                        self.model.encode, self.agent.data.x_pilot, epoch, step
                    )
            return self.penalty(a_own, received)

        # With fused pilots the private batch and the pilots share one graph: nothing
        # can be back-propagated before the penalty is known. Without neighbours there
        # is nothing to wait for (and the penalty is a constant zero). Agents sharing a
        # rank always back-propagate first (the same gradients, bit for bit): the rank
        # then holds only their pilot graphs while they wait for each other.
        split = sc.overlap_exchange or meets
        overlap = split and not sc.fused_pilots and bool(self.nbr.neighbours)
        return finish if overlap else finish()

    def send_pilots(self, own: torch.Tensor) -> Pending:
        """Post this step's message(s) to the neighbours; ``own`` is ``A_i``, detached."""
        return self.nbr.start_exchange(own, shapes=self.recv_shapes, device=self.agent.device)

    def penalty(self, a_own: torch.Tensor, received: list[torch.Tensor]) -> torch.Tensor:
        """Update the maps from this step's pilots and return ``R_i`` (differentiable)."""
        own, timer, sc = a_own.detach(), self.timer, self.cfg.sheaf
        sliding = sc.map_refresh == "step" and sc.window is not None
        with timer("maps"):
            for j, a_j in zip(self.nbr.neighbours, received, strict=True):
                head, tail = self._head_tail(j, own, a_j)
                if sliding:  # refit every step on the last W samples
                    self.window.add(j, head, tail)
                    self.maps[j] = self.window.fit(j, dtype=own.dtype)
                elif sc.map_refresh == "step" or j not in self.maps:
                    self.maps[j] = stiefel_map(head, tail)
                if sc.map_refresh == "epoch":
                    self.window.add(j, head, tail)
        with timer("penalty"):
            terms = [
                (a_j, self.maps[j], self.is_head[j])
                for j, a_j in zip(self.nbr.neighbours, received, strict=True)
            ]
            return sheaf_penalty(a_own, terms, self.lam_i)

    def end_epoch(self, epoch: int) -> None:
        if self.cfg.sheaf.map_refresh == "epoch":
            with self.timer("maps"):
                for j in self.nbr.neighbours:
                    self.maps[j] = self.window.fit(j, dtype=torch.float32).to(self.agent.device)
                self.window.reset()

    def edge_map(self, j: int) -> torch.Tensor:
        return self.maps[j]

    def extra_state(self) -> dict[str, Any]:
        cpu = torch.device("cpu")
        return {
            "maps": {j: v.cpu() for j, v in self.maps.items()},
            "window": {j: _moved(w, cpu) for j, w in self.window.state().items()},
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        device = self.agent.device
        self.maps = {int(j): v.to(device) for j, v in state["maps"].items()}
        self.window.load_state({int(j): _moved(w, device) for j, w in state["window"].items()})


def _moved(window_entry: Any, device: torch.device) -> Any:
    """A :meth:`PilotWindow.state` entry (``(cross, n)`` or a list of them) on ``device``."""
    if isinstance(window_entry, list):
        return [_moved(batch, device) for batch in window_entry]
    cross, n = window_entry
    return cross.to(device), n
