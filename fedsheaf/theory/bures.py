"""Bures–Wasserstein geometry of positive definite Gram matrices (seed 002, §4.2–4.3)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.psd import sqrt_and_inv_sqrt, sqrtm_psd, sym

__all__ = [
    "bw_distance_sq",
    "bw_distance",
    "transport_map",
    "selected_head",
    "gram_step",
    "barycenter",
    "BarycenterResult",
    "check_weights",
]


def check_weights(p: np.ndarray, n: int) -> np.ndarray:
    """Validate aggregation weights: ``n`` positive numbers summing to one."""
    p = np.asarray(p, dtype=float)
    if p.shape != (n,):
        raise ValueError(f"weights have shape {p.shape}, expected ({n},)")
    if np.any(p <= 0) or not np.isclose(p.sum(), 1.0, rtol=0, atol=1e-12):
        raise ValueError(f"weights must be positive and sum to one, got {p.tolist()}")
    return p


def bw_distance_sq(A: np.ndarray, B: np.ndarray) -> float:
    """Squared BW distance ``Tr A + Tr B − 2 Tr[(A^{1/2} B A^{1/2})^{1/2}]`` (clipped at 0)."""
    rA = sqrtm_psd(A)
    cross = np.trace(sqrtm_psd(rA @ sym(B) @ rA))
    return max(float(np.trace(A) + np.trace(B) - 2.0 * cross), 0.0)


def bw_distance(A: np.ndarray, B: np.ndarray) -> float:
    """Bures–Wasserstein distance between two PSD matrices."""
    return float(np.sqrt(bw_distance_sq(A, B)))


def transport_map(G: np.ndarray, G_m: np.ndarray) -> np.ndarray:
    """Optimal map ``T = G^{-1/2}(G^{1/2} G_m G^{1/2})^{1/2} G^{-1/2}``, so that ``T G T = G_m``.

    ``G`` must be positive definite; ``G_m`` PSD.
    """
    r, ri = sqrt_and_inv_sqrt(G)
    return sym(ri @ sqrtm_psd(r @ sym(G_m) @ r) @ ri)


def selected_head(W: np.ndarray, G_m: np.ndarray) -> np.ndarray:
    """Closest head to ``W`` with Gram ``G_m``: ``Π(W) = T(WWᵀ, G_m) W`` (Lemma 1)."""
    W = np.asarray(W, dtype=float)
    return transport_map(W @ W.T, G_m) @ W


def _mean_root(G: np.ndarray, Gs: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r, ri = sqrt_and_inv_sqrt(G)
    S = sum(pm * sqrtm_psd(r @ sym(Gm) @ r) for pm, Gm in zip(p, Gs, strict=True))
    return sym(S), ri


def gram_step(G: np.ndarray, Gs: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One step of the Gram recursion (9):
    ``G⁺ = G^{-1/2} [Σ p_m (G^{1/2} G_m G^{1/2})^{1/2}]² G^{-1/2}``."""
    Gs = np.asarray(Gs, dtype=float)
    p = check_weights(p, len(Gs))
    S, ri = _mean_root(G, Gs, p)
    return sym(ri @ S @ S @ ri)


class BarycenterResult(NamedTuple):
    """The BW barycenter and the number of fixed-point iterations used."""

    G: np.ndarray
    iterations: int


def barycenter(
    Gs: np.ndarray,
    p: np.ndarray,
    tol: float = 1e-12,
    max_iter: int = 1000,
    G0: np.ndarray | None = None,
) -> BarycenterResult:
    """Bures–Wasserstein barycenter ``argmin_X Σ p_m d²(X, G_m)`` of PD matrices.

    Runs the fixed-point iteration of Álvarez-Esteban et al. (2016), which is the Gram
    recursion (9), from ``G0`` (default ``Σ p_m G_m``) until the relative Frobenius step
    ``‖G_{k+1} − G_k‖ / ‖G_k‖`` is at most ``tol``.

    Raises
    ------
    ConvergenceError
        If the tolerance is not met within ``max_iter`` iterations.
    """
    Gs = np.asarray(Gs, dtype=float)
    p = check_weights(p, len(Gs))
    G = sym(np.tensordot(p, Gs, axes=1) if G0 is None else np.asarray(G0, dtype=float))
    step = np.inf
    for k in range(1, max_iter + 1):
        G_next = gram_step(G, Gs, p)
        step = float(np.linalg.norm(G_next - G) / np.linalg.norm(G))
        G = G_next
        if step <= tol:
            return BarycenterResult(G, k)
    raise ConvergenceError(
        f"BW barycenter did not converge: relative step {step:.3e} > tol {tol:.1e} "
        f"after max_iter={max_iter} iterations"
    )
