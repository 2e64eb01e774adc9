"""Head-only FedAvg's local objective and alignment, as plain torch/numpy math (seed 002).

Shapes follow torch (samples are rows): features ``H`` are ``(N, P)``, targets
``Y`` ``(N, C)``, the head ``W`` ``(C, P)`` and its bias ``b`` ``(C,)``, so the
UFM's ``W H_m + b1ᵀ`` is ``H Wᵀ + b`` here. Every term is the minibatch form of
the client objective of SPEC §4::

    L_m = 1/(2N)‖W H + b1ᵀ − Y‖² + λ_H/(2N)‖H‖² + λ_W/2‖W‖²
          + ρ/2‖W − W_t‖²                                   (proximal option)
          + γ λ_H/2 Tr[(Σ_cen − Σ_m)(WWᵀ + λ_H I)⁻¹]         (moment correction)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "align_head_",
    "moment_correction_term",
    "procrustes_rotation",
    "proximal_term",
    "target_moments",
    "ufm_objective",
]


def ufm_objective(W: Tensor, b: Tensor, H: Tensor, Y: Tensor, lam_H: float, lam_W: float) -> Tensor:
    """``1/(2N)‖H Wᵀ + b − Y‖² + λ_H/(2N)‖H‖² + λ_W/2‖W‖²`` for ``N`` = rows of ``H``.

    On a minibatch this is an unbiased estimate of the client's full objective.
    """
    n = H.shape[0]
    residual = H @ W.T + b - Y
    return (
        residual.pow(2).sum() / (2 * n)
        + lam_H * H.pow(2).sum() / (2 * n)
        + 0.5 * lam_W * W.pow(2).sum()
    )


def proximal_term(W: Tensor, W_ref: Tensor, rho: float) -> Tensor:
    """FedProx's head-only ``ρ/2‖W − W_ref‖_F²``."""
    return 0.5 * rho * (W - W_ref).pow(2).sum()


def moment_correction_term(W: Tensor, delta_sigma: Tensor, lam_H: float, gamma: float) -> Tensor:
    """``γ λ_H/2 Tr[D (WWᵀ + λ_H I)⁻¹]`` with ``D = Σ_cen − Σ_m`` (``delta_sigma``, C×C).

    Equals ``gamma * fedsheaf.theory.ufm.moment_correction(W, inst, m)``.
    """
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    A = W @ W.T + lam_H * eye
    return 0.5 * gamma * lam_H * torch.trace(torch.linalg.solve(A, delta_sigma.to(W.dtype)))


def target_moments(Y: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``μ = Y1/N`` and covariance ``Σ = YYᵀ/N − μμᵀ`` (divisor N) in float64."""
    y = np.asarray(Y.detach().cpu() if isinstance(Y, Tensor) else Y, dtype=np.float64)
    mu = y.mean(axis=0)
    d = y - mu
    return mu, (d.T @ d) / y.shape[0]


def procrustes_rotation(W_hat: np.ndarray, W_ref: np.ndarray) -> np.ndarray:
    """``Q = argmin_{QᵀQ = I} ‖Ŵ Q − W_ref‖_F`` over ``P×P`` orthogonal matrices.

    With ``ŴᵀW_ref = U S Vᵀ`` (full SVD), ``Q = U Vᵀ``. When both heads have full
    row rank, ``ŴQ`` is unique (the completion of ``U`` and ``V`` beyond rank C
    only acts on the null space of ``Ŵ``).
    """
    M = np.asarray(W_hat, dtype=np.float64).T @ np.asarray(W_ref, dtype=np.float64)
    U, _, Vt = np.linalg.svd(M)
    return U @ Vt


@torch.no_grad()
def align_head_(head: nn.Linear, feature: nn.Linear, W_ref: Tensor | np.ndarray) -> np.ndarray:
    """Rotate ``head`` to ``W_ref`` and undo it in the ``feature`` layer, in place.

    ``head`` maps features ``h`` to ``W h + b``; ``feature`` is the last linear layer
    producing ``h``. With ``Q`` from :func:`procrustes_rotation`, the head becomes
    ``WQ`` and the feature layer ``Qᵀ(A z + c)``, so predictions, the head Gram
    matrix and both penalties are unchanged; the head bias stays. Returns ``Q``.
    """
    ref = W_ref.detach().cpu().numpy() if isinstance(W_ref, Tensor) else np.asarray(W_ref)
    Q = procrustes_rotation(head.weight.detach().cpu().numpy(), ref)
    q = torch.from_numpy(Q)

    def rotate(param: Tensor, left: bool) -> None:
        x = param.detach().to(torch.float64).cpu()
        param.copy_((q.T @ x if left else x @ q).to(param.device, param.dtype))

    rotate(head.weight, left=False)
    rotate(feature.weight, left=True)
    if feature.bias is not None:
        rotate(feature.bias, left=True)
    return Q
