"""The federated unconstrained feature model (UFM) of seed 002 and its closed forms.

Notation follows SPEC §5: client target means ``μ_m`` and covariances ``Σ_m`` with
weights ``p_m``; ``φ(T) = √(λ_H/λ_W) T^{1/2} − λ_H I`` maps a target covariance to the
optimal head Gram matrix of the profiled objective
``F(W; T) = λ_H/2 Tr(T (WWᵀ + λ_H I)⁻¹) + λ_W/2 ‖W‖²``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsheaf.theory.bures import barycenter, bw_distance_sq
from fedsheaf.theory.exceptions import NotFullyActiveError
from fedsheaf.theory.psd import inv_pd, min_eig, sqrtm_psd, sym
from fedsheaf.util.errors import ConfigError

__all__ = [
    "UFMInstance",
    "phi",
    "corrected_targets",
    "client_grams",
    "g_cen",
    "g_within",
    "GapDecomposition",
    "gap_decomposition",
    "profiled_objective",
    "profiled_grad",
    "moment_correction",
    "moment_correction_grad",
]


@dataclass(frozen=True, eq=False)
class UFMInstance:
    """Client moments and regularisation of a federated UFM.

    Attributes
    ----------
    mus : (M, C) client target means.
    Sigmas : (M, C, C) client target covariances (symmetrised on construction).
    p : (M,) positive aggregation weights summing to one.
    lam_H, lam_W : feature and head penalties (positive).
    """

    mus: np.ndarray
    Sigmas: np.ndarray
    p: np.ndarray
    lam_H: float
    lam_W: float

    def __post_init__(self) -> None:
        mus = np.asarray(self.mus, dtype=float)
        Sigmas = np.asarray(self.Sigmas, dtype=float)
        p = np.asarray(self.p, dtype=float)
        if Sigmas.ndim != 3 or Sigmas.shape[1] != Sigmas.shape[2] or Sigmas.shape[0] < 1:
            raise ConfigError(f"UFM covariances must have shape (M, C, C), got {Sigmas.shape}")
        M, C = Sigmas.shape[:2]
        if mus.shape != (M, C):
            raise ConfigError(f"UFM means must have shape ({M}, {C}), got {mus.shape}")
        if p.shape != (M,) or np.any(p <= 0) or not np.isclose(p.sum(), 1.0, atol=1e-12):
            raise ConfigError(f"UFM weights must be {M} positive numbers summing to 1, got {p}")
        for name in ("lam_H", "lam_W"):
            val = getattr(self, name)
            if not (np.isfinite(val) and val > 0):
                raise ConfigError(f"UFM {name} must be positive and finite, got {val!r}")
        if not (np.all(np.isfinite(mus)) and np.all(np.isfinite(Sigmas))):
            raise ConfigError("UFM means and covariances must be finite")
        object.__setattr__(self, "mus", mus)
        object.__setattr__(self, "Sigmas", np.stack([sym(S) for S in Sigmas]))
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "lam_H", float(self.lam_H))
        object.__setattr__(self, "lam_W", float(self.lam_W))
        self._check_derived()

    def _check_derived(self) -> None:
        """The pooled moments must be finite too: blame the means or covariances that
        overflow them (squares of entries beyond ~1e154 exceed the float range)."""
        with np.errstate(over="ignore", invalid="ignore"):
            mu_ok = bool(np.all(np.isfinite(self.mu_g)) and np.all(np.isfinite(self.Sigma_mu)))
            within_ok = bool(np.all(np.isfinite(self.Sigma_within)))
            cen_ok = bool(np.all(np.isfinite(self.Sigma_cen)))
        if not mu_ok:
            m = int(np.argmax(np.max(np.abs(self.mus), axis=1)))
            big = float(np.max(np.abs(self.mus[m])))
            raise ConfigError(
                f"clients[{m}].mean (entries up to {big:.3g}) makes the between-client "
                "scatter Sigma_mu of the means overflow the float range; rescale the means "
                "(and covariances)"
            )
        if not within_ok:
            m = int(np.argmax(np.max(np.abs(self.Sigmas), axis=(1, 2))))
            big = float(np.max(np.abs(self.Sigmas[m])))
            raise ConfigError(
                f"clients[{m}].cov (entries up to {big:.3g}) makes the weighted covariance "
                "Sigma_within overflow the float range; rescale the covariances"
            )
        if not cen_ok:
            raise ConfigError(
                "Sigma_cen = Sigma_within + Sigma_mu overflows the float range: the means "
                "and covariances together are too large; rescale them"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (nested lists of floats)."""
        return {
            "lam_H": self.lam_H,
            "lam_W": self.lam_W,
            "p": self.p.tolist(),
            "mus": self.mus.tolist(),
            "Sigmas": self.Sigmas.tolist(),
        }

    @property
    def M(self) -> int:
        """Number of clients."""
        return self.Sigmas.shape[0]

    @property
    def C(self) -> int:
        """Target (output) dimension."""
        return self.Sigmas.shape[1]

    @property
    def mu_g(self) -> np.ndarray:
        """Global mean ``Σ p_m μ_m``."""
        return self.p @ self.mus

    @property
    def Sigma_within(self) -> np.ndarray:
        """``Σ p_m Σ_m``."""
        return sym(np.tensordot(self.p, self.Sigmas, axes=1))

    @property
    def Sigma_mu(self) -> np.ndarray:
        """Between-client scatter ``Σ p_m (μ_m − μ_g)(μ_m − μ_g)ᵀ``."""
        D = self.mus - self.mu_g
        return sym((D.T * self.p) @ D)

    @property
    def Sigma_cen(self) -> np.ndarray:
        """Pooled covariance ``Σ_within + Σ_μ``."""
        return self.Sigma_within + self.Sigma_mu


#: Largest Gram entry the toolkit accepts: the barycenter, transport maps and BW
#: distances multiply Grams, so their squares must stay below the float range (~1.8e308).
GRAM_LIMIT = 1e150


def phi(T: np.ndarray, lam_H: float, lam_W: float, name: str = "T") -> np.ndarray:
    """Optimal head Gram ``φ(T) = √(λ_H/λ_W) T^{1/2} − λ_H I`` of ``F(·; T)``.

    Raises
    ------
    NotFullyActiveError
        If ``λ_min(T) ≤ λ_H λ_W`` (outside the fully active regime); ``name`` identifies
        the offending matrix in the message.
    ConfigError
        If the Gram has entries above :data:`GRAM_LIMIT`.
    """
    lo = min_eig(T)
    if not lo > lam_H * lam_W:
        raise NotFullyActiveError(
            f"{name} is outside the fully active regime: smallest eigenvalue {lo:.6g} "
            f"must exceed lam_H*lam_W = {lam_H * lam_W:.6g}"
        )
    C = np.shape(T)[0]
    G = sym(np.sqrt(lam_H / lam_W) * sqrtm_psd(T) - lam_H * np.eye(C))
    big = float(np.max(np.abs(G)))
    if not big <= GRAM_LIMIT:
        raise ConfigError(
            f"{name} is too large: its optimal head Gram has entries up to {big:.3g}, and "
            f"products of Grams must stay in the float range (entries at most "
            f"{GRAM_LIMIT:.0e}); rescale the covariances (or lam_H/lam_W)"
        )
    return G


def corrected_targets(inst: UFMInstance, gamma: float = 0.0) -> np.ndarray:
    """Effective client covariances ``(1−γ) Σ_m + γ Σ_cen`` under the scaled correction γC_m."""
    if gamma == 0:
        return inst.Sigmas.copy()
    return (1.0 - gamma) * inst.Sigmas + gamma * inst.Sigma_cen


def client_grams(inst: UFMInstance, gamma: float = 0.0) -> np.ndarray:
    """Client optimal Grams ``G_m = φ((1−γ)Σ_m + γΣ_cen)``, shape (M, C, C)."""
    targets = corrected_targets(inst, gamma)
    suffix = "" if gamma == 0 else f" (moment-corrected, gamma={gamma:g})"
    return np.stack(
        [
            phi(T, inst.lam_H, inst.lam_W, name=f"clients[{m}] covariance{suffix}")
            for m, T in enumerate(targets)
        ]
    )


def g_cen(inst: UFMInstance) -> np.ndarray:
    """Centralized optimal Gram ``φ(Σ_cen)``."""
    return phi(inst.Sigma_cen, inst.lam_H, inst.lam_W, name="Sigma_cen")


def g_within(inst: UFMInstance) -> np.ndarray:
    """Optimal Gram of the averaged profiled objective, ``φ(Σ_within)``."""
    return phi(inst.Sigma_within, inst.lam_H, inst.lam_W, name="Sigma_within")


@dataclass(frozen=True, eq=False)
class GapDecomposition:
    """``G_cen − G_⋆ = M_μ + M_Σ + M_A`` (Proposition 1) with the matrices it involves."""

    G_cen: np.ndarray
    G_within: np.ndarray
    G_avg: np.ndarray
    G_star: np.ndarray
    G_clients: np.ndarray
    M_mu: np.ndarray
    M_Sigma: np.ndarray
    M_A: np.ndarray
    bw_variance: float
    barycenter_iterations: int

    @property
    def traces(self) -> dict[str, float]:
        """``{"M_mu": Tr M_μ, "M_Sigma": Tr M_Σ, "M_A": Tr M_A}``."""
        return {
            "M_mu": float(np.trace(self.M_mu)),
            "M_Sigma": float(np.trace(self.M_Sigma)),
            "M_A": float(np.trace(self.M_A)),
        }

    @property
    def relative_gap(self) -> float:
        """``‖G_cen − G_⋆‖_F / ‖G_cen‖_F``."""
        return float(np.linalg.norm(self.G_cen - self.G_star) / np.linalg.norm(self.G_cen))


def gap_decomposition(
    inst: UFMInstance, tol: float = 1e-13, max_iter: int = 1000
) -> GapDecomposition:
    """Compute ``G_cen, G_within, Σ p_m G_m, G_⋆`` and the three gap terms of Proposition 1.

    ``M_μ = G_cen − G_within``, ``M_Σ = G_within − Σ p_m G_m``, ``M_A = Σ p_m G_m − G_⋆``;
    ``bw_variance = Σ p_m d²(G_⋆, G_m)``, which equals ``Tr M_A``.
    """
    Gs = client_grams(inst)
    Gc, Gw = g_cen(inst), g_within(inst)
    G_avg = sym(np.tensordot(inst.p, Gs, axes=1))
    G_star, iters = barycenter(Gs, inst.p, tol=tol, max_iter=max_iter)
    var = float(sum(pm * bw_distance_sq(G_star, Gm) for pm, Gm in zip(inst.p, Gs, strict=True)))
    return GapDecomposition(
        G_cen=Gc,
        G_within=Gw,
        G_avg=G_avg,
        G_star=G_star,
        G_clients=Gs,
        M_mu=Gc - Gw,
        M_Sigma=Gw - G_avg,
        M_A=G_avg - G_star,
        bw_variance=var,
        barycenter_iterations=iters,
    )


def _resolvent(W: np.ndarray, lam_H: float) -> np.ndarray:
    """``(WWᵀ + λ_H I)⁻¹``."""
    return inv_pd(W @ W.T + lam_H * np.eye(W.shape[0]))


def profiled_objective(W: np.ndarray, T: np.ndarray, lam_H: float, lam_W: float) -> float:
    """``F(W; T) = λ_H/2 Tr(T (WWᵀ + λ_H I)⁻¹) + λ_W/2 ‖W‖_F²``."""
    W = np.asarray(W, dtype=float)
    Ainv = _resolvent(W, lam_H)
    return float(0.5 * lam_H * np.sum(T * Ainv) + 0.5 * lam_W * np.sum(W * W))


def profiled_grad(W: np.ndarray, T: np.ndarray, lam_H: float, lam_W: float) -> np.ndarray:
    """``∇F(W; T) = λ_W W − λ_H A⁻¹ T A⁻¹ W`` with ``A = WWᵀ + λ_H I``."""
    W = np.asarray(W, dtype=float)
    Ainv = _resolvent(W, lam_H)
    return lam_W * W - lam_H * (Ainv @ sym(T) @ Ainv @ W)


def moment_correction(W: np.ndarray, inst: UFMInstance, m: int, gamma: float = 1.0) -> float:
    """Scaled moment correction ``γ C_m(W) = γ λ_H/2 Tr[(Σ_cen − Σ_m)(WWᵀ + λ_H I)⁻¹]``.

    Since ``F`` is affine in ``T``, ``F(W; Σ_m) + γ C_m(W) = F(W; (1−γ)Σ_m + γΣ_cen)``.
    """
    W = np.asarray(W, dtype=float)
    D = inst.Sigma_cen - inst.Sigmas[m]
    return float(0.5 * gamma * inst.lam_H * np.sum(D * _resolvent(W, inst.lam_H)))


def moment_correction_grad(
    W: np.ndarray, inst: UFMInstance, m: int, gamma: float = 1.0
) -> np.ndarray:
    """Gradient of :func:`moment_correction` with respect to ``W``."""
    W = np.asarray(W, dtype=float)
    D = sym(inst.Sigma_cen - inst.Sigmas[m])
    Ainv = _resolvent(W, inst.lam_H)
    return -gamma * inst.lam_H * (Ainv @ D @ Ainv @ W)
