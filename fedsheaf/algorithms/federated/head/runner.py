"""Local training and evaluation of head-only FedAvg clients (no MPI).

A :class:`~.trainer.ClientRunner` whose batch loss is the UFM objective with
the backbone's features as ``H`` (plus the proximal and moment-correction
options), whose learning rate follows a cosine decay within each round, and
which optionally aligns the trained head to the broadcast before uploading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated.head.model import UFMNet
from fedsheaf.algorithms.federated.head.objective import (
    align_head_,
    moment_correction_term,
    proximal_term,
    target_moments,
    ufm_objective,
)
from fedsheaf.algorithms.federated.schedule import Algorithm
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.algorithms.federated.trainer import EVAL_BATCH, ClientRunner
from fedsheaf.config.sections import HeadConfig, TrainConfig

__all__ = ["HeadRunner"]


class HeadRunner(ClientRunner):
    """Trains the clients of one rank on the head-only UFM objective.

    Parameters
    ----------
    algorithm:
        Shares the head; trains head and backbone together for ``local_epochs``.
    model:
        The common initial :class:`~.head_model.UFMNet`.
    clients:
        This rank's clients (float targets ``(N_m, C)``).
    train:
        Batch size, optimiser, lr, grad clip (weight decay should be 0: the
        objective carries its own penalties).
    head:
        λ_H, λ_W, ρ, alignment, γ, ``lr_min``.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        model: UFMNet,
        clients: Mapping[int, ClientData],
        train: TrainConfig,
        head: HeadConfig,
        seed: int,
        device: torch.device,
    ) -> None:
        super().__init__(algorithm, model, clients, train, False, seed, device)
        self.hc = head
        self.moments = {c: target_moments(d.y_train) for c, d in self.clients.items()}
        self.delta_sigma: dict[int, torch.Tensor] = {}
        self._ref: torch.Tensor | None = None  # the broadcast head during a local update

    def set_sigma_cen(self, sigma_cen: np.ndarray) -> None:
        """Store ``Σ_cen − Σ_m`` for each hosted client (the moment exchange's reply)."""
        device = self.model.head.weight.device
        self.delta_sigma = {
            c: torch.as_tensor(sigma_cen - sigma, dtype=torch.float32, device=device)
            for c, (_, sigma) in self.moments.items()
        }

    # ---- training -------------------------------------------------------------
    def train_locally(self, client: int, round_: int) -> float:
        """Train head and backbone from the broadcast head (the proximal term's
        reference); then align the head to it, if asked, before it is uploaded."""
        model: UFMNet = self.model
        self._ref = model.head.weight.detach().clone()
        loss = super().train_locally(client, round_)
        if self.hc.align:
            align_head_(model.head, model.feature, self._ref)
        self._ref = None
        return loss

    caches_head_features = False  # the UFM objective needs the features H_m themselves

    def batch_loss(self, client: int, forward: Any, xb: torch.Tensor, yb: torch.Tensor) -> Any:
        model: UFMNet = self.model
        hc = self.hc
        W, b = model.head.weight, model.head.bias
        loss = ufm_objective(W, b, model.representation(xb), yb, hc.lam_H, hc.lam_W)
        if hc.rho > 0 and self._ref is not None:
            loss = loss + proximal_term(W, self._ref, hc.rho)
        if hc.moment_gamma > 0:
            if client not in self.delta_sigma:
                raise RuntimeError("moment correction needs Σ_cen: call set_sigma_cen first")
            loss = loss + moment_correction_term(
                W, self.delta_sigma[client], hc.lam_H, hc.moment_gamma
            )
        return loss

    def lr_schedule(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        if self.hc.lr_min is None or total_steps < 1:
            return None
        return torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=total_steps, eta_min=self.hc.lr_min
        )

    # ---- evaluation -----------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, client: int, shared: np.ndarray) -> tuple[float, ...]:  # type: ignore[override]
        """``(test SSE, test values, train SSE, train values, L_m)`` with the current head.

        ``values`` counts samples × targets (the MSE's denominator); ``L_m`` is the
        client's UFM objective on its whole training set (no proximal or correction
        term).
        """
        self.install(client, shared)
        self.model.eval()
        model: UFMNet = self.model
        data, hc = self.clients[client], self.hc
        W, b = model.head.weight, model.head.bias

        def features(x: torch.Tensor) -> torch.Tensor:
            if len(x) == 0:
                return torch.zeros(0, W.shape[1], device=W.device)
            return torch.cat(
                [model.representation(x[i : i + EVAL_BATCH]) for i in range(0, len(x), EVAL_BATCH)]
            )

        H_test, H_train = features(data.x_test), features(data.x_train)
        sse_test = float((H_test @ W.T + b - data.y_test).pow(2).sum())
        sse_train = float((H_train @ W.T + b - data.y_train).pow(2).sum())
        objective = float(ufm_objective(W, b, H_train, data.y_train, hc.lam_H, hc.lam_W))
        return (
            sse_test,
            float(data.y_test.numel()),
            sse_train,
            float(data.y_train.numel()),
            objective,
        )
