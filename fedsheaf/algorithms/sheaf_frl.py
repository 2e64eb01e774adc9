"""Sheaf-FRL (SPEC §2, Algorithm 1): pilot exchange, closed-form maps, sheaf penalty.

Per step: ``A_i = encoder(pilot batch)`` → ``nbr.exchange(A_i)`` returns every
neighbour's ``A_j`` → maps of incident edges (refreshed per step, or fitted once
per epoch from the pilot window) → ``sheaf_penalty`` joins the task loss.
"""

from __future__ import annotations

import torch

from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm, Exchange, Reporter
from fedsheaf.seeding import derive_seed
from fedsheaf.sheaf.maps import PilotWindow, stiefel_map
from fedsheaf.sheaf.penalty import agent_lambda, sheaf_penalty
from fedsheaf.sheaf.pilots import PilotStream


class SheafFRL(DecentralizedAlgorithm):
    name = "sheaf_frl"

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        super().__init__(agent, nbr, reporter)
        sc, dims = self.cfg.sheaf, agent.graph.dims
        self.lam_i = agent_lambda(sc.lam, dims[agent.id])
        # Same seed on every rank (no agent id): all agents encode the same pilots.
        self.pilots = PilotStream(
            derive_seed(self.cfg.seed, "pilots"),
            len(agent.data.x_pilot),
            min(sc.pilot_batch, len(agent.data.x_pilot)),
        )
        self.recv_shapes = [(dims[j], self.pilots.batch) for j in nbr.neighbours]
        self.maps: dict[int, torch.Tensor] = {}
        self.window = PilotWindow()

    def _head_tail(self, j: int, a_own: torch.Tensor, a_j: torch.Tensor):
        return (a_own, a_j) if self.is_head[j] else (a_j, a_own)

    def regulariser(self, epoch: int, step: int) -> torch.Tensor:
        a = self.agent
        idx = torch.as_tensor(self.pilots.indices(epoch, step), device=a.device)
        a_own = self.model.encode(a.data.x_pilot[idx]).T  # d_i × K
        received = self.nbr.exchange(a_own, shapes=self.recv_shapes, device=a.device)
        own = a_own.detach()
        for j, a_j in zip(self.nbr.neighbours, received, strict=True):
            head, tail = self._head_tail(j, own, a_j)
            if self.cfg.sheaf.map_refresh == "step" or j not in self.maps:
                self.maps[j] = stiefel_map(head, tail)
            if self.cfg.sheaf.map_refresh == "epoch":
                self.window.add(j, head, tail)
        terms = [
            (a_j, self.maps[j], self.is_head[j])
            for j, a_j in zip(self.nbr.neighbours, received, strict=True)
        ]
        return sheaf_penalty(a_own, terms, self.lam_i)

    def end_epoch(self, epoch: int) -> None:
        if self.cfg.sheaf.map_refresh == "epoch":
            for j in self.nbr.neighbours:
                self.maps[j] = self.window.fit(j, dtype=torch.float32).to(self.agent.device)
            self.window.reset()

    def edge_map(self, j: int) -> torch.Tensor:
        return self.maps[j]
