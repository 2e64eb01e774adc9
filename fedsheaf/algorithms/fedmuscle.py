"""FedMuscle baseline (SPEC §3; Setayesh et al., 2026): contrastive alignment rounds.

Training runs in rounds of ``baseline.fedmuscle.task_epochs`` task-only epochs and
``align_epochs`` alignment epochs. In an alignment epoch every step each agent
encodes the same pilot batch (one seeded stream on every rank), the server averages
the agents' pilot latents and sends the average back, and the agent adds

    λ · InfoNCE(ẑ_i, z̄; τ) = −λ/K Σ_k log softmax_k'(⟨ẑ_{i,k}, ẑ̄_{k'}⟩/τ)[k]

(cosine similarities, temperature ``baseline.fedmuscle.temperature``): each pilot's
representation is pulled toward the network average of *that* pilot and pushed from
the others. Equal latent sizes only. Communication accuracy uses the post-hoc maps.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import Agent, Exchange, Reporter
from fedsheaf.algorithms.hub_base import Hub, HubAgent, HubContext, HubServer
from fedsheaf.sheaf.pilots import PilotStream
from fedsheaf.util.seeding import derive_seed


def is_alignment_epoch(epoch: int, task_epochs: int, align_epochs: int) -> bool:
    """Epochs ``task_epochs .. task_epochs + align_epochs − 1`` of every round align."""
    return epoch % (task_epochs + align_epochs) >= task_epochs


def contrastive_alignment(
    z: torch.Tensor, target: torch.Tensor, temperature: float
) -> torch.Tensor:
    """InfoNCE of rows of ``z`` (K × d) against the matching rows of ``target`` (constant)."""
    zn = F.normalize(z, dim=1)
    tn = F.normalize(target.detach().to(z.dtype), dim=1)
    logits = zn @ tn.T / temperature
    return F.cross_entropy(logits, torch.arange(len(z), device=z.device))


def _pilot_stream(ctx: HubContext) -> PilotStream:
    k = min(ctx.cfg.sheaf.pilot_batch, ctx.n_pilots)
    return PilotStream(derive_seed(ctx.cfg.seed, "pilots"), ctx.n_pilots, k)


class FedMuscle(HubAgent):
    name = "fedmuscle"

    def __init__(
        self, agent: Agent, nbr: Exchange, reporter: Reporter, hub: Hub, ctx: HubContext
    ) -> None:
        super().__init__(agent, nbr, reporter, hub, ctx)
        self.fm = self.cfg.baseline.fedmuscle
        self.pilots = _pilot_stream(ctx)

    def regulariser(self, epoch: int, step: int) -> torch.Tensor | None:
        if not is_alignment_epoch(epoch, self.fm.task_epochs, self.fm.align_epochs):
            return None
        a = self.agent
        idx = torch.as_tensor(self.pilots.indices(epoch, step), device=a.device)
        z = self.model.encode(a.data.x_pilot[idx])
        self.hub.upload(z.detach().cpu().numpy().astype(np.float32), "pilots")
        avg = self.hub.broadcast(None, (z.shape[0], z.shape[1]), "pilots")
        target = torch.from_numpy(avg).to(a.device)
        return self.cfg.sheaf.lam * contrastive_alignment(z, target, self.fm.temperature)


class FedMuscleServer(HubServer):
    """Averages the agents' pilot latents at every step of every alignment epoch."""

    def serve_epoch(self, epoch: int) -> None:
        fm, ctx = self.ctx.cfg.baseline.fedmuscle, self.ctx
        if not is_alignment_epoch(epoch, fm.task_epochs, fm.align_epochs):
            return
        shape = (_pilot_stream(ctx).batch, ctx.dim)
        for _ in range(ctx.steps_per_epoch):
            got = self.hub.collect(shape, "pilots")
            self.hub.broadcast(got.mean(axis=0), shape, "pilots")
