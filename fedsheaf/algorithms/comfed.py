"""ComFed baseline (SPEC §3; Badi et al., 2026): prototype consensus in a learned shared space.

Every agent learns a linear projection ``P_i ∈ R^{r×d_i}`` (``baseline.comfed.rank``;
null: the largest latent d) along with its model. Each step it projects its private
batch's latents, forms class prototypes ``q_{i,c} = P_i · mean{z : y = c}`` and sends
them (with the class counts) to its neighbours; the penalty pulls its own prototypes
toward each neighbour's for the classes both have in their batches:

    R_i = λ_i/2 · Σ_j 1/|C_ij| Σ_{c ∈ C_ij} ‖q_{i,c} − q_{j,c}‖²,   λ_i = λ/d_i.

Neighbour prototypes are constants. ComFed learns its alignment during training, so
communication accuracy transports j → i through ``P_i⁺ P_j`` (no post-hoc maps).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm, Exchange, Reporter
from fedsheaf.sheaf.penalty import agent_lambda
from fedsheaf.util.seeding import torch_generator


def class_prototypes(z: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """``(C, d + 1)``: class means of ``z`` (zero rows for absent classes) and class counts."""
    onehot = F.one_hot(y, n_classes).to(z.dtype)  # n × C
    counts = onehot.sum(0)
    means = (onehot.T @ z) / counts.clamp_min(1).unsqueeze(1)
    return torch.cat([means, counts.unsqueeze(1)], dim=1)


def prototype_penalty(
    own: torch.Tensor, received: list[torch.Tensor], lam_i: float
) -> torch.Tensor:
    """``λ_i/2 Σ_j mean_{c shared} ‖own_c − recv_{j,c}‖²`` from :func:`class_prototypes` rows."""
    means, counts = own[:, :-1], own[:, -1]
    total = means.new_zeros(())
    for other in received:
        shared = (counts > 0) & (other[:, -1] > 0)
        if shared.any():
            diff = means[shared] - other[shared, :-1].detach().to(means.dtype)
            total = total + diff.pow(2).sum() / shared.sum()
    return total * (lam_i / 2)


def transport_matrix(p_i: torch.Tensor, p_j: torch.Tensor) -> torch.Tensor:
    """``P_i⁺ P_j`` (d_i × d_j): j's latents carried into i's space through the shared space."""
    return torch.linalg.pinv(p_i.to(torch.float64)) @ p_j.to(torch.float64)


class ComFed(DecentralizedAlgorithm):
    name = "comfed"

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        super().__init__(agent, nbr, reporter)
        dims, i = agent.graph.dims, agent.id
        self.rank = self.cfg.baseline.comfed.rank or max(dims)
        gen = torch_generator(self.cfg.seed, "comfed-projection", i)
        init = torch.randn(self.rank, dims[i], generator=gen) / dims[i] ** 0.5
        self.proj = torch.nn.Parameter(init.to(agent.device))
        self.optimizer.add_param_group({"params": [self.proj]})
        self.lam_i = agent_lambda(self.cfg.sheaf.lam, dims[i])
        self.n_classes = agent.data.n_classes
        self.msg_shapes = [(self.n_classes, self.rank + 1)] * len(nbr.neighbours)
        self.transports: dict[int, torch.Tensor] = {}

    def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = self.model.encode(x)
        loss = F.cross_entropy(self.model.decode(z), y)
        own = class_prototypes(z @ self.proj.T, y, self.n_classes)
        received = self.nbr.exchange(own.detach(), shapes=self.msg_shapes, device=z.device)
        return loss + prototype_penalty(own, received, self.lam_i)

    @torch.no_grad()
    def prepare_transport(self) -> None:
        p = self.proj.detach()
        shapes = [(self.rank, self.agent.graph.dims[j]) for j in self.nbr.neighbours]
        received = self.nbr.exchange(p, shapes=shapes, device=p.device)
        self.transports = {
            j: transport_matrix(p, p_j).to(p.dtype)
            for j, p_j in zip(self.nbr.neighbours, received, strict=True)
        }

    def extra_state(self) -> dict[str, Any]:
        return {"proj": self.proj.detach().cpu()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.proj.copy_(state["proj"].to(self.proj.device))

    def edge_map(self, j: int) -> torch.Tensor:
        # The base applies ``z Vᵀ`` at a head and ``z V`` at a tail; give it P_i⁺P_j that way.
        t = self.transports[j]
        return t if self.is_head[j] else t.T
