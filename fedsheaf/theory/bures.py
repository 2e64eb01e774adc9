"""Bures–Wasserstein geometry of positive definite Gram matrices (seed 002, §4.2–4.3)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.psd import PINV_RCOND, sqrt_and_pinv_sqrt, sqrtm_psd, sym

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

    ``G`` positive definite, ``G_m`` PSD. Directions where ``G`` is numerically null
    (eigenvalue at most :data:`~fedsheaf.theory.psd.PINV_RCOND` times its largest) are
    dropped (pseudo-inverse root): there ``T`` maps to zero instead of failing.
    """
    r, ri = sqrt_and_pinv_sqrt(G)
    return sym(ri @ sqrtm_psd(r @ sym(G_m) @ r) @ ri)


def selected_head(W: np.ndarray, G_m: np.ndarray) -> np.ndarray:
    """Closest head to ``W`` with Gram ``G_m``: ``Π(W) = T(WWᵀ, G_m) W`` (Lemma 1)."""
    W = np.asarray(W, dtype=float)
    return transport_map(W @ W.T, G_m) @ W


def _mean_root(G: np.ndarray, Gs: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r, ri = sqrt_and_pinv_sqrt(G)
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

    Directions that every ``G_m`` leaves numerically null (eigenvalue of ``Σ p_m G_m`` at
    most :data:`~fedsheaf.theory.psd.PINV_RCOND` times its largest) stay null: the
    iteration runs on their complement (pseudo-inverse roots), where the barycenter
    lives, since it is dominated by the arithmetic mean (Bhatia, Jain & Lim,
    "Inequalities for the Wasserstein mean of positive definite matrices", 2019). Its
    entries along them are then zero instead of their true values, at most that small.

    Rounding stalls the step near ``1e-16`` times the matrices' condition number, so an
    extremely ill-conditioned set needs a looser ``tol`` (or more ``max_iter``).

    Raises
    ------
    ConvergenceError
        If the tolerance is not met within ``max_iter`` iterations.
    """
    Gs = np.asarray(Gs, dtype=float)
    p = check_weights(p, len(Gs))
    if G0 is None:
        G = sym(np.tensordot(p, Gs, axes=1))
        w = np.linalg.eigvalsh(G)
        if w[0] <= PINV_RCOND * w[-1]:  # a shared null direction: start on its complement
            r, _ = sqrt_and_pinv_sqrt(G)
            G = sym(r @ r)
    else:
        G = sym(np.asarray(G0, dtype=float))
    step = np.inf
    for k in range(1, max_iter + 1):
        G_next = gram_step(G, Gs, p)
        step = float(np.linalg.norm(G_next - G) / np.linalg.norm(G))
        G = G_next
        if step <= tol:
            return BarycenterResult(G, k)
    kappa = _condition(Gs)
    reach = f", so a tol of {1e-15 * kappa:.0e} is reachable" if np.isfinite(kappa) else ""
    raise ConvergenceError(
        f"BW barycenter did not converge: relative step {step:.3e} > tol {tol:.1e} "
        f"after max_iter={max_iter} iterations (condition number of the matrices up to "
        f"{kappa:.3g}: rounding stalls the step near 1e-16 times it{reach})"
    )


def _condition(Gs: np.ndarray) -> float:
    """The largest condition number ``λ_max / λ_min`` among ``Gs`` (inf if singular)."""
    worst = 1.0
    for Gm in Gs:
        w = np.linalg.eigvalsh(sym(Gm))
        worst = max(worst, float(w[-1] / w[0]) if w[0] > 0 else np.inf)
    return worst
