"""Whitening (end of every encoder) and colouring (start of every head), SPEC §2.

``Whitening`` maps batch-first latents ``z`` (B × d) to approximately zero-mean,
identity-covariance ones: per-feature standardisation (default) or full ZCA. In
training it uses the batch statistics and updates running ones; in eval, or for a
training batch of one sample, it uses the running statistics. ``Colouring`` is its
left inverse: it reuses exactly the statistics of the whitening's last forward (in
training) or the running ones (in eval), so ``colour(whiten(z)) = z``.

ZCA needs ``Σ^{-1/2}`` and ``Σ^{1/2}`` of a covariance that is rank-deficient whenever
B ≤ d; autograd through ``eigh`` is unstable there (1/(λ_i − λ_j) with repeated
eigenvalues), so the matrix powers use a Daleckii–Krein backward that stays finite.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["WHITENING_MODES", "Colouring", "Whitening", "sym_matrix_power"]

WHITENING_MODES = ("standardize", "zca")


class _SymPow(torch.autograd.Function):
    """``S ↦ S^p`` for symmetric positive-definite ``S`` (eigh), computed in float64."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, p: float) -> Tensor:
        lam, q = torch.linalg.eigh(s.to(torch.float64))
        lam = lam.clamp_min(torch.finfo(torch.float64).tiny)
        ctx.save_for_backward(lam, q)
        ctx.p = p
        return ((q * lam.pow(p)) @ q.T).to(s.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        lam, q = ctx.saved_tensors
        p = ctx.p
        f = lam.pow(p)
        diff = lam[:, None] - lam[None, :]
        fdiff = f[:, None] - f[None, :]
        # Divided differences (f(λ_i) − f(λ_j)) / (λ_i − λ_j), with f'(λ) where they meet.
        close = diff.abs() <= 1e-9 * lam.abs().max()
        fprime = p * lam.pow(p - 1)
        mean_fprime = 0.5 * (fprime[:, None] + fprime[None, :])
        dd = torch.where(close, mean_fprime, fdiff / torch.where(close, 1.0, diff))
        g = grad.to(torch.float64)
        g = 0.5 * (g + g.T)
        out = q @ ((q.T @ g @ q) * dd) @ q.T
        return out.to(grad.dtype), None


def sym_matrix_power(s: Tensor, p: float) -> Tensor:
    """``S^p`` of a symmetric positive-definite matrix with a stable gradient."""
    return _SymPow.apply(s, p)


class Whitening(nn.Module):
    """Whitening of batch-first latents ``(B, d)``.

    Parameters
    ----------
    d:
        Latent dimension.
    mode:
        ``"standardize"`` (per-feature ``(z − μ)/√(σ² + eps)``) or ``"zca"``
        (``(z − μ)(Σ + eps·I)^{-1/2}``).
    momentum:
        Running statistics update ``r ← (1 − momentum)·r + momentum·batch`` (unbiased
        batch variance/covariance, as BatchNorm does).
    eps:
        Added to variances / covariance eigenvalues.
    """

    # buffers (registered in __init__; running_var or running_cov, by mode)
    running_mean: Tensor
    running_var: Tensor
    running_cov: Tensor

    def __init__(
        self, d: int, mode: str = "standardize", momentum: float = 0.1, eps: float = 1e-5
    ) -> None:
        super().__init__()
        if mode not in WHITENING_MODES:
            raise ValueError(f"whitening mode must be one of {WHITENING_MODES}, got {mode!r}")
        if d <= 0:
            raise ValueError(f"latent dim must be positive, got {d}")
        self.d = d
        self.mode = mode
        self.momentum = momentum
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(d))
        if mode == "standardize":
            self.register_buffer("running_var", torch.ones(d))
        else:
            self.register_buffer("running_cov", torch.eye(d))
        # (mean, second-moment + eps) used by the last forward; read by Colouring.
        self._last: tuple[Tensor, Tensor] | None = None

    def extra_repr(self) -> str:
        return f"{self.d}, mode={self.mode}, momentum={self.momentum}, eps={self.eps}"

    def __getstate__(self) -> dict:
        # The cache may hold non-leaf tensors, which deepcopy/pickle refuse.
        state = dict(super().__getstate__())
        state["_last"] = None
        return state

    def reset_running_stats(self) -> None:
        self.running_mean.zero_()
        if self.mode == "standardize":
            self.running_var.fill_(1.0)
        else:
            self.running_cov.copy_(torch.eye(self.d, dtype=self.running_cov.dtype))
        self._last = None

    def _running_stats(self) -> tuple[Tensor, Tensor]:
        if self.mode == "standardize":
            return self.running_mean, self.running_var + self.eps
        eye = torch.eye(self.d, dtype=self.running_cov.dtype, device=self.running_cov.device)
        return self.running_mean, self.running_cov + self.eps * eye

    def _batch_stats(self, z: Tensor) -> tuple[Tensor, Tensor]:
        b = z.shape[0]
        mean = z.mean(dim=0)
        zc = z - mean
        if self.mode == "standardize":
            var = zc.pow(2).mean(dim=0)
            stats = (mean, var + self.eps)
            unbiased = var.detach() * (b / (b - 1))
            running = self.running_var
        else:
            cov = zc.T @ zc / b
            eye = torch.eye(self.d, dtype=z.dtype, device=z.device)
            stats = (mean, cov + self.eps * eye)
            unbiased = cov.detach() * (b / (b - 1))
            running = self.running_cov
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(mean.detach().to(self.running_mean.dtype), alpha=m)
            running.mul_(1 - m).add_(unbiased.to(running.dtype), alpha=m)
        return stats

    def forward(self, z: Tensor) -> Tensor:
        if z.ndim != 2 or z.shape[1] != self.d:
            raise ValueError(f"Whitening({self.d}) expects (B, {self.d}), got {tuple(z.shape)}")
        if self.training and z.shape[0] > 1:
            mean, second = self._batch_stats(z)
        else:
            mean, second = self._running_stats()
        mean, second = mean.to(z.dtype), second.to(z.dtype)
        self._last = (mean, second)
        if self.mode == "standardize":
            return (z - mean) * second.rsqrt()
        return (z - mean) @ sym_matrix_power(second, -0.5)

    def last_stats(self) -> tuple[Tensor, Tensor]:
        """Statistics of the last forward, or the running ones if there was none."""
        return self._last if self._last is not None else self._running_stats()

    def inverse(self, w: Tensor, use_running: bool) -> Tensor:
        """Undo the whitening: ``w·√(σ² + eps) + μ`` or ``w (Σ + eps·I)^{1/2} + μ``."""
        mean, second = self._running_stats() if use_running else self.last_stats()
        mean, second = mean.to(w.dtype), second.to(w.dtype)
        if self.mode == "standardize":
            return w * second.sqrt() + mean
        return w @ sym_matrix_power(second, 0.5) + mean


class Colouring(nn.Module):
    """Left inverse of a :class:`Whitening`, sharing its statistics (not its ownership).

    The whitening is held by reference and not registered as a submodule, so its
    buffers belong to the encoder only (one copy in ``state_dict``; a head-only split
    never ships encoder statistics). In training mode it uses the statistics of the
    whitening's last forward (batch ones, or running ones if that forward was in eval
    or had a single sample), keeping the gradient path through them so that
    ``colour ∘ whiten`` is the identity for autograd too; call it after a whitening
    forward of the same step. In eval mode it uses the running statistics.
    """

    def __init__(self, whitening: Whitening) -> None:
        super().__init__()
        self._whitening = (whitening,)  # a tuple hides it from nn.Module registration
        self.d = whitening.d

    @property
    def whitening(self) -> Whitening:
        return self._whitening[0]

    def extra_repr(self) -> str:
        return f"{self.d}, mode={self.whitening.mode}"

    def forward(self, w: Tensor) -> Tensor:
        if w.ndim != 2 or w.shape[1] != self.d:
            raise ValueError(f"Colouring({self.d}) expects (B, {self.d}), got {tuple(w.shape)}")
        return self.whitening.inverse(w, use_running=not self.training)
