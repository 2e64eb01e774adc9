"""Federated UFM simulator: rounds of head-only FedAvg on the profiled objective.

Each round every client starts from the broadcast head ``W_t`` and returns a head; the
server averages them with weights ``p_m``. Local behaviour (``SimSettings.mode``):

``exact``     the selected optimal head ``Π_m(W_t) = T_m(G_t) W_t`` (Lemma 1);
``proximal``  a numerical L-BFGS minimiser of ``F(W; Σ_m) + ρ/2 ‖W − W_t‖²``;
``gd``        ``E`` profiled gradient steps of rate ``η`` (the server map Φ of App. G);
``joint``     centralized training: the optimal head of the pooled objective
              ``F(W; Σ_cen)`` closest to ``W_t`` (so ``G_1 = G_cen``).

The scaled moment correction ``γ C_m`` replaces every client's target covariance by
``(1−γ) Σ_m + γ Σ_cen`` (``F`` is affine in its target), which applies to all modes.
Everything is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from fedsheaf.theory.bures import barycenter, bw_distance_sq, selected_head
from fedsheaf.theory.checks import check_int, check_real
from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.local import gd_steps, proximal_solve
from fedsheaf.theory.psd import rel_err, sym
from fedsheaf.theory.ufm import (
    GapDecomposition,
    UFMInstance,
    client_grams,
    corrected_targets,
    g_cen,
    gap_decomposition,
)
from fedsheaf.util.errors import ConfigError

__all__ = ["MODES", "PROX_STARTS", "SimSettings", "SimResult", "server_round", "simulate"]

MODES = ("exact", "proximal", "gd", "joint")
PROX_STARTS = ("selected", "broadcast")


@dataclass(frozen=True)
class SimSettings:
    """Simulation settings; invalid values raise :class:`ConfigError` naming the field.

    Attributes
    ----------
    mode : one of :data:`MODES`.
    rounds : number of communication rounds.
    rho : proximal weight (``proximal`` mode).
    gamma : scale of the moment correction in ``[0, 1]`` (0 = none, 1 = full).
    local_steps, lr : ``E`` and ``η`` of the ``gd`` mode.
    prox_start : start of each proximal solve: the selected head ``Π_m(W_t)`` (as in the
        paper's App. D.1) or the broadcast ``W_t``.
    solver_gtol, solver_max_iter, solver_grad_tol : L-BFGS-B settings of proximal solves.
    barycenter_tol, barycenter_max_iter : stopping rule of the BW barycenter iterations
        (``G_⋆`` and the prediction): relative Frobenius step at most ``barycenter_tol``
        within ``barycenter_max_iter`` iterations. Client Grams with extreme condition
        numbers stall the step near 1e-16 times it and need a looser tolerance.
    """

    mode: str = "exact"
    rounds: int = 18
    rho: float = 1e-3
    gamma: float = 0.0
    local_steps: int = 10
    lr: float = 0.1
    prox_start: str = "selected"
    solver_gtol: float = 1e-12
    solver_max_iter: int = 20000
    solver_grad_tol: float = 1e-7
    barycenter_tol: float = 1e-13
    barycenter_max_iter: int = 1000

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"simulation.mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.prox_start not in PROX_STARTS:
            raise ConfigError(
                f"simulation.prox_start must be one of {list(PROX_STARTS)}, got {self.prox_start!r}"
            )
        _check_int("rounds", self.rounds, 0)
        _check_int("local_steps", self.local_steps, 1)
        _check_int("solver_max_iter", self.solver_max_iter, 1)
        _check_int("barycenter_max_iter", self.barycenter_max_iter, 1)
        _check_real("rho", self.rho, lo=0.0)
        _check_real("gamma", self.gamma, lo=0.0, hi=1.0)
        _check_real("lr", self.lr, lo=0.0, strict=True)
        _check_real("solver_gtol", self.solver_gtol, lo=0.0, strict=True)
        _check_real("solver_grad_tol", self.solver_grad_tol, lo=0.0, strict=True)
        _check_real("barycenter_tol", self.barycenter_tol, lo=0.0, hi=1.0, strict=True)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of all settings (the keys accepted under ``simulation:``)."""
        return tuple(f.name for f in fields(cls))


def _check_int(name: str, val: Any, lo: int) -> None:
    check_int(f"simulation.{name}", val, lo)


def _check_real(name: str, val: Any, lo: float, hi: float = np.inf, strict: bool = False) -> None:
    check_real(f"simulation.{name}", val, lo, hi, strict)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Trajectory of a simulation plus its reference Gram matrices.

    ``grams[t]`` is ``G_t`` for ``t = 0..rounds``; ``rel_err_*[t]`` is
    ``‖G_t − G_ref‖_F / ‖G_ref‖_F``. ``G_pred`` is the predicted limit of the
    ``exact``/``proximal`` modes, the barycenter of the corrected client Grams (``G_⋆`` for
    ``γ = 0``, ``G_cen`` for ``γ = 1``). ``bw_objective[t] = Σ p_m d²(G_t, G_m^γ)`` tends
    to ``Tr M_A`` under exact selection without correction.
    """

    settings: SimSettings
    heads: np.ndarray
    grams: np.ndarray
    gap: GapDecomposition
    G_pred: np.ndarray
    client_grams: np.ndarray
    rel_err_star: np.ndarray
    rel_err_cen: np.ndarray
    rel_err_within: np.ndarray
    rel_err_pred: np.ndarray
    bw_objective: np.ndarray
    local_grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (nested lists of floats)."""
        g = self.gap
        return {
            "settings": {f: getattr(self.settings, f) for f in SimSettings.field_names()},
            "gap": {
                "trace": g.traces,
                "relative_gap_to_cen": g.relative_gap,
                "bw_variance": g.bw_variance,
                "barycenter_iterations": g.barycenter_iterations,
            },
            "references": {
                "G_star": g.G_star.tolist(),
                "G_cen": g.G_cen.tolist(),
                "G_within": g.G_within.tolist(),
                "G_avg": g.G_avg.tolist(),
                "G_pred": self.G_pred.tolist(),
                "G_clients": g.G_clients.tolist(),
                "G_clients_corrected": self.client_grams.tolist(),
                "M_mu": g.M_mu.tolist(),
                "M_Sigma": g.M_Sigma.tolist(),
                "M_A": g.M_A.tolist(),
            },
            "rounds": [
                {
                    "round": t,
                    "G": self.grams[t].tolist(),
                    "rel_err_star": float(self.rel_err_star[t]),
                    "rel_err_cen": float(self.rel_err_cen[t]),
                    "rel_err_within": float(self.rel_err_within[t]),
                    "rel_err_pred": float(self.rel_err_pred[t]),
                    "bw_objective": float(self.bw_objective[t]),
                    "local_grad_norm": (
                        float(self.local_grad_norm[t - 1])
                        if t > 0 and len(self.local_grad_norm)
                        else None
                    ),
                }
                for t in range(len(self.grams))
            ],
        }


def server_round(
    W: np.ndarray,
    inst: UFMInstance,
    targets: np.ndarray,
    grams: np.ndarray,
    G_cen: np.ndarray,
    settings: SimSettings,
) -> tuple[np.ndarray, float]:
    """One round: every client's returned head from broadcast ``W``, averaged with ``p``.

    Returns the new head and the largest local gradient norm (0 for closed-form modes).
    """
    mode = settings.mode
    if mode == "joint":
        return selected_head(W, G_cen), 0.0
    heads, gmax = [], 0.0
    for T, Gm in zip(targets, grams, strict=True):
        if mode == "exact":
            heads.append(selected_head(W, Gm))
        elif mode == "gd":
            heads.append(gd_steps(W, T, inst.lam_H, inst.lam_W, settings.local_steps, settings.lr))
        else:
            start = selected_head(W, Gm) if settings.prox_start == "selected" else W
            sol = proximal_solve(
                W,
                T,
                inst.lam_H,
                inst.lam_W,
                settings.rho,
                W_start=start,
                gtol=settings.solver_gtol,
                max_iter=settings.solver_max_iter,
                grad_tol=settings.solver_grad_tol,
            )
            heads.append(sol.W)
            gmax = max(gmax, sol.grad_norm)
    return np.tensordot(inst.p, np.stack(heads), axes=1), gmax


def simulate(inst: UFMInstance, W0: np.ndarray, settings: SimSettings) -> SimResult:
    """Run ``settings.rounds`` rounds from the head ``W0`` (C×P, full row rank)."""
    W = np.asarray(W0, dtype=float)
    if W.ndim != 2 or W.shape[0] != inst.C or np.linalg.matrix_rank(W) < inst.C:
        raise ConfigError(f"initial head must be a full-row-rank {inst.C}×P matrix, got {W.shape}")
    tol, max_iter = settings.barycenter_tol, settings.barycenter_max_iter
    try:
        gap = gap_decomposition(inst, tol=tol, max_iter=max_iter)
        grams = client_grams(inst, settings.gamma)
        G_pred = barycenter(grams, inst.p, tol=tol, max_iter=max_iter).G
    except ConvergenceError as exc:
        raise ConvergenceError(
            f"{exc}: set simulation.barycenter_tol or barycenter_max_iter (fedsheaf ufm "
            "--barycenter-tol, --barycenter-max-iter)"
        ) from None
    targets = corrected_targets(inst, settings.gamma)
    Gc = g_cen(inst)
    heads, gnorms = [W], []
    for _ in range(settings.rounds):
        W, gn = server_round(W, inst, targets, grams, Gc, settings)
        heads.append(W)
        gnorms.append(gn)
    Gt = np.stack([sym(H @ H.T) for H in heads])

    def errs(ref: np.ndarray) -> np.ndarray:
        return np.array([rel_err(G, ref) for G in Gt])

    bw = np.array(
        [sum(pm * bw_distance_sq(G, Gm) for pm, Gm in zip(inst.p, grams, strict=True)) for G in Gt]
    )
    return SimResult(
        settings=settings,
        heads=np.stack(heads),
        grams=Gt,
        gap=gap,
        G_pred=G_pred,
        client_grams=grams,
        rel_err_star=errs(gap.G_star),
        rel_err_cen=errs(gap.G_cen),
        rel_err_within=errs(gap.G_within),
        rel_err_pred=errs(G_pred),
        bw_objective=bw,
        local_grad_norm=np.array(gnorms) if settings.mode == "proximal" else np.zeros(0),
    )
