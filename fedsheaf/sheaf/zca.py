"""ZCA whitening fitted post hoc on a set of latents (non-cooperative baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ZCA:
    """``whiten(z) = (z − μ) W`` and its inverse ``colour(w) = w W⁻¹ + μ`` (batch-first).

    ``W = Σ^{-1/2}`` is symmetric, so whitened latents keep the original axes as
    far as possible (zero-phase component analysis).
    """

    mean: Tensor
    w: Tensor
    w_inv: Tensor

    def whiten(self, z: Tensor) -> Tensor:
        return (z - self.mean) @ self.w

    def colour(self, w: Tensor) -> Tensor:
        return w @ self.w_inv + self.mean


@torch.no_grad()
def zca_fit(z: Tensor, eps: float = 1e-5) -> ZCA:
    """Fit ZCA on latents ``z`` (n × d): ``Σ = cov(z) + eps·I`` via a symmetric eigensolve."""
    if z.ndim != 2 or z.shape[0] < 2:
        raise ValueError(f"zca_fit needs at least two latent rows, got shape {tuple(z.shape)}")
    z64 = z.to(torch.float64)
    mean = z64.mean(0)
    zc = z64 - mean
    cov = zc.T @ zc / (z.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(
        cov + eps * torch.eye(z.shape[1], dtype=torch.float64, device=z.device)
    )
    evals = evals.clamp_min(eps)
    w = (evecs * evals.rsqrt()) @ evecs.T
    w_inv = (evecs * evals.sqrt()) @ evecs.T
    return ZCA(mean.to(z.dtype), w.to(z.dtype), w_inv.to(z.dtype))
