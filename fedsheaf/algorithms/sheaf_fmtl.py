"""Sheaf-FMTL baseline (SPEC §3; Issaid et al., 2025): a sheaf in *parameter* space.

Agent i with parameter vector ``θ_i ∈ R^{n_i}`` keeps, per neighbour j, a restriction
map ``P_ij ∈ R^{d_ij × n_i}``, ``d_ij = max(1, ⌊γ·min(n_i, n_j)⌋)``. After each epoch of
local training (one round of the authors' algorithm) the ends of every edge swap
``P_ij θ_i`` (a d_ij-vector) and take one step on ``λ/2 ‖P_ij θ_i − P_ji θ_j‖²``:

    θ_i  ← θ_i  − α λ Σ_j P_ijᵀ (P_ij θ_i − P_ji θ_j)        (α: the agent's lr)
    P_ij ← P_ij − η λ (P_ij θ_i' − P_ji θ_j) θ_i'ᵀ            (η = baseline.fmtl.rate)

where θ_i' is the θ_i just updated (the authors' order) and P_ji θ_j the message.

Communication accuracy uses the post-hoc maps of the non-cooperative baseline.
The maps cost ``Σ_edges d_ij (n_i + n_j)`` numbers, which grows with γ and with the
models: :func:`fmtl_map_entries` and :func:`fmtl_map_bytes` give it, every agent reports
its own share, and the run summary carries the network total.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector

from fedsheaf.algorithms.base import Agent, Exchange, Reporter
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.util.seeding import torch_generator


def stalk_dim(n_i: int, n_j: int, gamma: float) -> int:
    """``d_ij = max(1, ⌊γ·min(n_i, n_j)⌋)``, the dimension of edge {i, j}'s stalk."""
    return max(1, int(gamma * min(n_i, n_j)))


def fmtl_map_entries(
    param_counts: Sequence[int], edges: Sequence[tuple[int, int]], gamma: float
) -> int:
    """Numbers stored by all restriction maps: ``Σ_{(i,j)} d_ij (n_i + n_j)``."""
    return sum(
        stalk_dim(param_counts[i], param_counts[j], gamma) * (param_counts[i] + param_counts[j])
        for i, j in edges
    )


def fmtl_map_bytes(
    param_counts: Sequence[int],
    edges: Sequence[tuple[int, int]],
    gamma: float,
    bytes_per_entry: int = 4,
) -> int:
    """Memory of all restriction maps (float32 by default; 2 for the paper's half precision)."""
    return bytes_per_entry * fmtl_map_entries(param_counts, edges, gamma)


@torch.no_grad()
def fmtl_step(
    theta: torch.Tensor,
    maps: dict[int, torch.Tensor],
    received: dict[int, torch.Tensor],
    lam: float,
    alpha: float,
    eta: float,
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """One sheaf round: a gradient step on ``λ/2 Σ_j ‖P_ij θ − m_j‖²`` for θ, then for each P_ij.

    ``received[j]`` is ``m_j = P_ji θ_j``, sent before either end moved. θ moves with step
    ``α``; then each map takes a gradient step of size ``η`` at the *updated* θ',
    ``P_ij ← P_ij − ηλ (P_ij θ' − m_j) θ'ᵀ``, as the authors' ``update_restriction_maps``
    does (it recomputes the disagreement after the θ step). Returns θ' and the maps.
    """
    grad = sum((p.T @ (p @ theta - received[j]) for j, p in maps.items()), torch.zeros_like(theta))
    theta = theta - alpha * lam * grad
    new_maps = {
        j: p - eta * lam * torch.outer(p @ theta - received[j], theta) for j, p in maps.items()
    }
    return theta, new_maps


class SheafFMTL(NonCooperative):
    name = "sheaf_fmtl"

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        super().__init__(agent, nbr, reporter)
        fc, i = self.cfg.baseline.fmtl, agent.id
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.n_params = sum(p.numel() for p in self.params)
        counts = self.nbr.exchange(
            torch.tensor([[float(self.n_params)]]), shapes=[(1, 1)] * len(nbr.neighbours)
        )
        self.neighbour_params = {
            j: int(c.item()) for j, c in zip(nbr.neighbours, counts, strict=True)
        }
        self.fmtl_maps: dict[int, torch.Tensor] = {}
        for j in nbr.neighbours:
            rows = stalk_dim(self.n_params, self.neighbour_params[j], fc.gamma)
            gen = torch_generator(self.cfg.seed, "fmtl-map", i, j)
            self.fmtl_maps[j] = (0.01 * torch.randn(rows, self.n_params, generator=gen)).to(
                agent.device
            )
        self.map_bytes = sum(m.numel() * m.element_size() for m in self.fmtl_maps.values())

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        lam, alpha, eta = self.cfg.sheaf.lam, self.lr, self.cfg.baseline.fmtl.rate
        theta = parameters_to_vector(self.params)
        nbrs = self.nbr.neighbours
        received = self.nbr.exchange_each(
            [(self.fmtl_maps[j] @ theta).unsqueeze(1) for j in nbrs],
            shapes=[(self.fmtl_maps[j].shape[0], 1) for j in nbrs],
            device=theta.device,
        )
        msgs = {j: m[:, 0] for j, m in zip(nbrs, received, strict=True)}
        theta, self.fmtl_maps = fmtl_step(theta, self.fmtl_maps, msgs, lam, alpha, eta)
        offset = 0
        for p in self.params:
            p.copy_(theta[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    def extra_state(self) -> dict[str, Any]:
        return {"maps": {j: m.cpu() for j, m in self.fmtl_maps.items()}}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.fmtl_maps = {int(j): m.to(self.agent.device) for j, m in state["maps"].items()}

    def summary_extras(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The run summary's line: γ and the memory of all restriction maps (float32)."""
        return {
            "fmtl_gamma": self.cfg.baseline.fmtl.gamma,
            "fmtl_map_bytes": sum(int(r["fmtl_map_bytes"]) for r in records),
        }

    def evaluate(self) -> dict[str, Any]:
        record = super().evaluate()
        record.update(fmtl_gamma=self.cfg.baseline.fmtl.gamma, fmtl_map_bytes=self.map_bytes)
        return record
