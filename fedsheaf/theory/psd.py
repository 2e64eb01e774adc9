"""Symmetric positive (semi)definite matrix helpers built on ``numpy.linalg.eigh``.

Every matrix function here symmetrises its input first and works on the
eigen-decomposition, clipping tiny negative eigenvalues produced by rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "sym",
    "eigh_sym",
    "psd_apply",
    "sqrtm_psd",
    "inv_sqrtm_pd",
    "sqrt_and_inv_sqrt",
    "sqrt_and_pinv_sqrt",
    "PINV_RCOND",
    "inv_pd",
    "min_eig",
    "rel_err",
    "rotation",
    "rotated_diag",
]


def sym(A: np.ndarray) -> np.ndarray:
    """Symmetric part ``(A + Aᵀ)/2`` of a square matrix (halved first: no overflow)."""
    A = np.asarray(A, dtype=float)
    return 0.5 * A + 0.5 * A.T


def eigh_sym(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and orthonormal eigenvectors of ``sym(A)``."""
    return np.linalg.eigh(sym(A))


def psd_apply(A: np.ndarray, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Spectral function ``V f(Λ) Vᵀ`` of the symmetric matrix ``A``."""
    w, V = eigh_sym(A)
    return sym((V * f(w)) @ V.T)


def sqrtm_psd(A: np.ndarray) -> np.ndarray:
    """Principal square root of a PSD matrix; negative eigenvalues are clipped to 0."""
    return psd_apply(A, lambda w: np.sqrt(np.clip(w, 0.0, None)))


def _check_pd(w: np.ndarray, what: str) -> None:
    scale = max(float(np.max(np.abs(w))), np.finfo(float).tiny)
    if w[0] <= 1e-14 * scale:
        raise ValueError(
            f"{what}: matrix is not positive definite (smallest eigenvalue {w[0]:.3e})"
        )


def inv_sqrtm_pd(A: np.ndarray) -> np.ndarray:
    """Inverse principal square root ``A^{-1/2}`` of a positive definite matrix.

    Raises
    ------
    ValueError
        If ``A`` is singular or indefinite beyond rounding (relative threshold 1e-14).
    """
    w, V = eigh_sym(A)
    _check_pd(w, "inv_sqrtm_pd")
    return sym((V / np.sqrt(w)) @ V.T)


def sqrt_and_inv_sqrt(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(A^{1/2}, A^{-1/2})`` of a positive definite matrix from one eigen-decomposition."""
    w, V = eigh_sym(A)
    _check_pd(w, "sqrt_and_inv_sqrt")
    s = np.sqrt(w)
    return sym((V * s) @ V.T), sym((V / s) @ V.T)


#: Relative cutoff of :func:`sqrt_and_pinv_sqrt`: eigenvalues at most this times the
#: largest one count as zero. Below it the inverse square root would amplify rounding
#: errors by more than 1e6 (1/√1e-12), so such directions are numerically null.
PINV_RCOND = 1e-12


def sqrt_and_pinv_sqrt(A: np.ndarray, rcond: float = PINV_RCOND) -> tuple[np.ndarray, np.ndarray]:
    """``(A^{1/2}, (A^{1/2})^+)`` of a PSD matrix, with numerically null directions dropped.

    Eigenvalues at most ``rcond`` times the largest (negative ones from rounding
    included) count as zero in both roots, so the pair is a PSD-safe stand-in for
    :func:`sqrt_and_inv_sqrt` on the range of ``A``: for a positive definite ``A`` with
    condition number below ``1/rcond`` it returns the same matrices.
    """
    w, V = eigh_sym(A)
    scale = max(float(np.max(np.abs(w))), np.finfo(float).tiny)
    keep = w > rcond * scale
    s = np.sqrt(np.where(keep, w, 1.0))
    root = np.where(keep, s, 0.0)
    inv = np.where(keep, 1.0 / s, 0.0)
    return sym((V * root) @ V.T), sym((V * inv) @ V.T)


def inv_pd(A: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive definite matrix (via eigh, result symmetric)."""
    w, V = eigh_sym(A)
    _check_pd(w, "inv_pd")
    return sym((V / w) @ V.T)


def min_eig(A: np.ndarray) -> float:
    """Smallest eigenvalue of ``sym(A)``."""
    return float(np.linalg.eigvalsh(sym(A))[0])


def rel_err(A: np.ndarray, B: np.ndarray) -> float:
    """Relative Frobenius error ``‖A − B‖_F / ‖B‖_F``."""
    return float(np.linalg.norm(np.asarray(A) - np.asarray(B)) / np.linalg.norm(B))


def rotation(theta_deg: float) -> np.ndarray:
    """Planar rotation ``R_θ`` through ``theta_deg`` degrees (counter-clockwise)."""
    t = np.deg2rad(theta_deg)
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, -s], [s, c]])


def rotated_diag(theta_deg: float, eigenvalues: np.ndarray) -> np.ndarray:
    """``R_θ diag(eigenvalues) R_θᵀ`` for a 2×2 matrix."""
    R = rotation(theta_deg)
    return sym((R * np.asarray(eigenvalues, dtype=float)) @ R.T)
