"""FedProto baseline (SPEC §3; Tan et al., 2022): one global prototype per class.

After each local epoch every agent sends its per-class latent sums and counts
(over its training set, eval mode) to the server, which keeps a global prototype
per class as an exponential moving average (``baseline.fedproto.momentum``) of the
count-weighted class means, and sends the prototypes back. During training each
sample's latent is pulled toward its class's global prototype:

    R_i = λ_i/2 · mean_b ‖z_b − p_{y_b}‖²,   λ_i = λ/d   (classes with a prototype only)

Equal latent sizes only (a global prototype lives in one shared space).
Communication accuracy uses the post-hoc maps of the non-cooperative baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import Agent, Exchange, Reporter
from fedsheaf.algorithms.hub_base import Hub, HubAgent, HubContext, HubServer
from fedsheaf.sheaf.penalty import agent_lambda


def ema_prototypes(
    protos: np.ndarray, valid: np.ndarray, sums: np.ndarray, counts: np.ndarray, momentum: float
) -> tuple[np.ndarray, np.ndarray]:
    """Server update: ``p_c ← m p_c + (1 − m) mean_c`` for classes seen this round.

    ``sums`` (C × d) and ``counts`` (C) are totals over all agents. A class seen for the
    first time takes its mean; a class nobody saw keeps its prototype.
    """
    seen = counts > 0
    means = np.zeros_like(protos)
    means[seen] = sums[seen] / counts[seen, None]
    out = protos.copy()
    old = seen & valid
    out[old] = momentum * protos[old] + (1 - momentum) * means[old]
    out[seen & ~valid] = means[seen & ~valid]
    return out, valid | seen


def prototype_pull(
    z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, valid: torch.Tensor, lam_i: float
) -> torch.Tensor:
    """``λ_i/2 · mean ‖z_b − p_{y_b}‖²`` over the samples whose class has a prototype."""
    keep = valid[y]
    if not keep.any():
        return z.new_zeros(())
    diff = z[keep] - protos[y[keep]].to(z.dtype)
    return diff.pow(2).sum(dim=1).mean() * (lam_i / 2)


class FedProto(HubAgent):
    name = "fedproto"

    def __init__(
        self, agent: Agent, nbr: Exchange, reporter: Reporter, hub: Hub, ctx: HubContext
    ) -> None:
        super().__init__(agent, nbr, reporter, hub, ctx)
        c, d = ctx.n_classes, ctx.dim
        self.protos = torch.zeros(c, d, device=agent.device)
        self.valid = torch.zeros(c, dtype=torch.bool, device=agent.device)
        self.lam_i = agent_lambda(self.cfg.sheaf.lam, d)

    def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = self.model.encode(x)
        loss = F.cross_entropy(self.model.decode(z), y)
        return loss + prototype_pull(z, y, self.protos, self.valid, self.lam_i)

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        d = self.agent.data
        z = self.latents(d.x_train)
        onehot = F.one_hot(d.y_train, self.ctx.n_classes).to(z.dtype)
        rows = torch.cat([onehot.T @ z, onehot.sum(0, keepdim=True).T], dim=1)
        self.hub.upload(rows.cpu().numpy().astype(np.float32), "prototypes")
        msg = self.hub.broadcast(None, (self.ctx.n_classes, self.ctx.dim + 1), "prototypes")
        t = torch.from_numpy(msg).to(self.agent.device)
        self.protos, self.valid = t[:, :-1], t[:, -1] > 0

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "protos": self.protos.cpu(), "valid": self.valid.cpu()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.protos = state["protos"].to(self.agent.device)
        self.valid = state["valid"].to(self.agent.device)


class FedProtoServer(HubServer):
    """Keeps the global prototypes; one collect/broadcast per epoch."""

    def __init__(self, ctx: HubContext, hub: Hub) -> None:
        super().__init__(ctx, hub)
        self.protos = np.zeros((ctx.n_classes, ctx.dim), dtype=np.float64)
        self.valid = np.zeros(ctx.n_classes, dtype=bool)

    def serve_epoch(self, epoch: int) -> None:
        shape = (self.ctx.n_classes, self.ctx.dim + 1)
        got = self.hub.collect(shape, "prototypes").astype(np.float64)
        sums, counts = got[..., :-1].sum(0), got[..., -1].sum(0)
        self.protos, self.valid = ema_prototypes(
            self.protos, self.valid, sums, counts, self.ctx.cfg.baseline.fedproto.momentum
        )
        msg = np.concatenate([self.protos, self.valid[:, None].astype(np.float64)], axis=1)
        self.hub.broadcast(msg, shape, "prototypes")

    def state_dict(self) -> dict[str, Any]:
        return {
            "protos": torch.from_numpy(self.protos.copy()),
            "valid": torch.from_numpy(self.valid.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.protos = state["protos"].numpy().astype(np.float64)
        self.valid = state["valid"].numpy().astype(bool)
