"""Client-side solvers on the profiled UFM objective ``F(W; T)`` (seed 002, App. D.1 and G)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize

from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.ufm import profiled_grad, profiled_objective

__all__ = ["ProximalSolution", "proximal_solve", "gd_steps"]


class ProximalSolution(NamedTuple):
    """A local head and the Frobenius norm of the penalised gradient at it."""

    W: np.ndarray
    grad_norm: float


def proximal_solve(
    W_ref: np.ndarray,
    T: np.ndarray,
    lam_H: float,
    lam_W: float,
    rho: float,
    W_start: np.ndarray | None = None,
    gtol: float = 1e-12,
    max_iter: int = 20000,
    grad_tol: float = 1e-7,
) -> ProximalSolution:
    """Minimise ``F(W; T) + ρ/2 ‖W − W_ref‖²`` with L-BFGS and the analytic gradient.

    Parameters
    ----------
    W_ref : broadcast head the proximal term pulls towards.
    T : effective target covariance of the client (moment correction already folded in).
    rho : proximal weight (``0`` gives the unregularised local solve).
    W_start : initial point (default ``W_ref``).
    gtol, max_iter : L-BFGS-B stopping rules (max-abs gradient entry, iterations).
    grad_tol : the solve fails if the final gradient norm exceeds this.

    Raises
    ------
    ConvergenceError
        If the final gradient norm exceeds ``grad_tol``.
    """
    W_ref = np.asarray(W_ref, dtype=float)
    shape = W_ref.shape
    x0 = (W_ref if W_start is None else np.asarray(W_start, dtype=float)).ravel()

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        W = x.reshape(shape)
        D = W - W_ref
        f = profiled_objective(W, T, lam_H, lam_W) + 0.5 * rho * float(np.sum(D * D))
        g = profiled_grad(W, T, lam_H, lam_W) + rho * D
        return f, g.ravel()

    res = minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "gtol": gtol, "ftol": 1e-300, "maxcor": 30},
    )
    W = res.x.reshape(shape)
    gnorm = float(np.linalg.norm(fun(res.x)[1]))
    if not gnorm <= grad_tol:
        raise ConvergenceError(
            f"proximal local solve (rho={rho:g}) stopped with gradient norm {gnorm:.3e} "
            f"> {grad_tol:.1e}: {res.message}"
        )
    return ProximalSolution(W, gnorm)


def gd_steps(
    W: np.ndarray, T: np.ndarray, lam_H: float, lam_W: float, steps: int, lr: float
) -> np.ndarray:
    """``steps`` profiled gradient steps ``W ← W − η ∇F(W; T)`` from ``W``.

    Raises
    ------
    ConvergenceError
        If the iterates blow up (step size too large).
    """
    W = np.array(W, dtype=float)
    for k in range(steps):
        W = W - lr * profiled_grad(W, T, lam_H, lam_W)
        if not np.all(np.isfinite(W)) or np.max(np.abs(W)) > 1e100:
            raise ConvergenceError(
                f"local gradient descent diverged at step {k + 1} with lr={lr:g}; "
                "lower the step size"
            )
    return W
