"""FedRep versus FedAvg on the linear shared-representation model of seed 003.

Client ``i`` has inputs ``x ~ N(0, I_d)`` and labels ``y = w_iᵀ B*ᵀ x + σ ε``, with a
shared ground-truth representation ``B* ∈ St(d, k)`` and its own head ``w_i ∈ R^k``.
Each client keeps the same ``m`` training samples for the whole run.

* **FedRep** (alternating minimisation–descent): every participating client fits its head
  exactly by least squares for the current ``B``, then takes ``local_steps`` gradient
  steps on ``B`` with the head frozen; the server averages the returned ``B`` and
  orthonormalises it by QR.
* **FedAvg**: one shared model ``(B, w)``; every participating client takes
  ``local_steps`` joint gradient steps on ``(B, w)``; the server averages both.

Both start from the method-of-moments estimate: the top-``k`` eigenvectors of
``(1/n) Σ_i (1/m) Σ_j y_ij² x_ij x_ijᵀ``. The tracked quantity is the principal-angle
distance ``dist(B̂, B*) = ‖B̂_⊥ᵀ B*‖₂`` (sine of the largest principal angle).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedsheaf.theory.checks import check_int, check_real
from fedsheaf.util.errors import ConfigError

__all__ = [
    "LinearSettings",
    "LinearData",
    "make_data",
    "principal_angle_distance",
    "moments_init",
    "fedrep_round",
    "fedavg_round",
    "clients_per_round",
    "run_linear",
]


@dataclass(frozen=True)
class LinearSettings:
    """Settings of the synthetic experiment; invalid values raise :class:`ConfigError`.

    Attributes
    ----------
    d, k, n, m : input dimension, representation rank, clients, training samples per client.
    rounds : communication rounds.
    participation : fraction r of clients sampled per round: max(1, floor(r·n)) clients.
    noise : label noise standard deviation σ.
    lr, local_steps : FedRep step size and number of gradient steps on ``B`` per round.
    fedavg_lr, fedavg_local_steps : FedAvg step size and local joint steps per round.
    m_test : test samples per client for the final mean-squared errors.
    seed : every random draw (data, truth, client sampling) derives from it.
    """

    d: int = 20
    k: int = 2
    n: int = 100
    m: int = 10
    rounds: int = 50
    participation: float = 1.0
    noise: float = 1e-3
    lr: float = 0.5
    local_steps: int = 1
    fedavg_lr: float = 0.1
    fedavg_local_steps: int = 10
    m_test: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("d", "k", "n", "m", "local_steps", "fedavg_local_steps", "m_test"):
            _positive_int(name, getattr(self, name))
        _positive_int("rounds", self.rounds, lo=0)
        _positive_int("seed", self.seed, lo=0)
        if self.k > self.d:
            raise ConfigError(f"k={self.k} must not exceed d={self.d}")
        if self.m < self.k:
            raise ConfigError(f"m={self.m} samples per client cannot fit a {self.k}-dim head")
        for name in ("lr", "fedavg_lr"):
            _real(name, getattr(self, name), lo=0.0, strict=True)
        _real("noise", self.noise, lo=0.0)
        _real("participation", self.participation, lo=0.0, hi=1.0, strict=True)


def _positive_int(name: str, val: Any, lo: int = 1) -> None:
    check_int(f"fedrep-linear {name}", val, lo)


def _real(name: str, val: Any, lo: float, hi: float = np.inf, strict: bool = False) -> None:
    check_real(f"fedrep-linear {name}", val, lo, hi, strict)


@dataclass(frozen=True, eq=False)
class LinearData:
    """Ground truth and per-client samples: ``X[i]`` is (m, d), ``y[i]`` is (m,)."""

    B_star: np.ndarray
    W_star: np.ndarray
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def _orthonormal(A: np.ndarray) -> np.ndarray:
    Q, R = np.linalg.qr(A)
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def make_data(s: LinearSettings, rng: np.random.Generator) -> LinearData:
    """Draw ``B*`` (Haar on the Stiefel manifold), heads ``w_i ~ N(0, I_k)`` and samples."""
    B_star = _orthonormal(rng.standard_normal((s.d, s.k)))
    W_star = rng.standard_normal((s.n, s.k))
    theta = W_star @ B_star.T  # (n, d): client predictors B* w_i

    def samples(count: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.standard_normal((s.n, count, s.d))
        y = np.einsum("imd,id->im", X, theta) + s.noise * rng.standard_normal((s.n, count))
        return X, y

    X, y = samples(s.m)
    X_test, y_test = samples(s.m_test)
    return LinearData(B_star, W_star, X, y, X_test, y_test)


def principal_angle_distance(B: np.ndarray, B_star: np.ndarray) -> float:
    """``‖B̂_⊥ᵀ B*‖₂`` for the column spaces of ``B`` and orthonormal ``B*`` (in [0, 1])."""
    Q = _orthonormal(B)
    return float(np.linalg.norm(B_star - Q @ (Q.T @ B_star), ord=2))


def moments_init(X: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Top-``k`` eigenvectors of ``(1/n) Σ_i (1/m) Σ_j y_ij² x_ij x_ijᵀ`` (method of moments)."""
    Z = np.einsum("imd,im->imd", X, y)  # y x per sample
    Mom = np.einsum("imd,ime->de", Z, Z) / (X.shape[0] * X.shape[1])
    _, V = np.linalg.eigh(0.5 * (Mom + Mom.T))
    return V[:, ::-1][:, :k].copy()


def _heads(X: np.ndarray, y: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Least-squares heads ``argmin_w ‖X_i B w − y_i‖`` of the given clients, shape (c, k)."""
    return np.stack(
        [np.linalg.lstsq(Xi @ B, yi, rcond=None)[0] for Xi, yi in zip(X, y, strict=True)]
    )


def fedrep_round(
    B: np.ndarray, X: np.ndarray, y: np.ndarray, lr: float, local_steps: int
) -> np.ndarray:
    """One FedRep round on the participating clients' data ``X`` (c, m, d), ``y`` (c, m).

    Returns the QR-orthonormalised average of the clients' updated representations.
    """
    m = X.shape[1]
    Bs = []
    for Xi, yi, wi in zip(X, y, _heads(X, y, B), strict=True):
        Bi = B.copy()
        for _ in range(local_steps):
            resid = Xi @ (Bi @ wi) - yi
            Bi -= lr * np.outer(Xi.T @ resid, wi) / m
        Bs.append(Bi)
    return _orthonormal(np.mean(Bs, axis=0))


def fedavg_round(
    B: np.ndarray, w: np.ndarray, X: np.ndarray, y: np.ndarray, lr: float, local_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """One FedAvg round: joint gradient steps on the shared ``(B, w)``, then averaging."""
    m = X.shape[1]
    Bs, ws = [], []
    for Xi, yi in zip(X, y, strict=True):
        Bi, wi = B.copy(), w.copy()
        for _ in range(local_steps):
            resid = Xi @ (Bi @ wi) - yi
            g = Xi.T @ resid / m  # gradient w.r.t. the predictor B w
            Bi, wi = Bi - lr * np.outer(g, wi), wi - lr * (Bi.T @ g)
        Bs.append(Bi)
        ws.append(wi)
    return np.mean(Bs, axis=0), np.mean(ws, axis=0)


def _test_mse(X: np.ndarray, y: np.ndarray, preds: np.ndarray) -> float:
    """Mean over clients of the test MSE of per-client predictors ``preds`` (n, d)."""
    return float(np.mean((np.einsum("imd,id->im", X, preds) - y) ** 2))


def clients_per_round(participation: float, n: int) -> int:
    """``max(1, floor(r·n))``, the server-based runs' rule (the FedRep authors' code);
    :func:`fedsheaf.algorithms.federated.protocol.n_selected` is the same without
    importing torch."""
    return max(1, min(n, math.floor(participation * n + 1e-9)))


def run_linear(settings: LinearSettings | None = None, **overrides: Any) -> dict[str, Any]:
    """Run FedRep and FedAvg on one draw of the linear model; return JSON-ready results.

    Keys: ``settings``; ``dist_fedrep`` and ``dist_fedavg`` (length ``rounds + 1``,
    index 0 = method-of-moments initialisation); ``test_mse_fedrep`` (learned ``B`` with
    heads refit on each client's training data), ``test_mse_fedavg`` (the shared model),
    ``test_mse_local`` (per-client least squares in ``R^d`` when ``m ≥ d``, else ``None``)
    and ``noise_floor`` (``σ²``).
    """
    s = settings if settings is not None else LinearSettings()
    if overrides:
        s = LinearSettings(**{**asdict(s), **overrides})
    data_ss, sample_ss = np.random.SeedSequence(s.seed).spawn(2)
    data = make_data(s, np.random.default_rng(data_ss))
    sampler = np.random.default_rng(sample_ss)
    per_round = clients_per_round(s.participation, s.n)
    schedule = [np.sort(sampler.choice(s.n, per_round, replace=False)) for _ in range(s.rounds)]

    B_rep = moments_init(data.X, data.y, s.k)
    B_avg, w_avg = B_rep.copy(), np.zeros(s.k)
    dist_rep = [principal_angle_distance(B_rep, data.B_star)]
    dist_avg = [dist_rep[0]]
    for idx in schedule:
        X, y = data.X[idx], data.y[idx]
        B_rep = fedrep_round(B_rep, X, y, s.lr, s.local_steps)
        B_avg, w_avg = fedavg_round(B_avg, w_avg, X, y, s.fedavg_lr, s.fedavg_local_steps)
        for B, out in ((B_rep, dist_rep), (B_avg, dist_avg)):
            if not np.all(np.isfinite(B)):
                raise ConfigError("fedrep-linear diverged; lower lr / fedavg_lr")
            out.append(principal_angle_distance(B, data.B_star))

    heads = _heads(data.X, data.y, B_rep)
    mse_rep = _test_mse(data.X_test, data.y_test, heads @ B_rep.T)
    shared = np.broadcast_to(B_avg @ w_avg, (s.n, s.d))
    mse_avg = _test_mse(data.X_test, data.y_test, shared)
    mse_local = None
    if s.m >= s.d:
        local = np.stack(
            [np.linalg.lstsq(Xi, yi, rcond=None)[0] for Xi, yi in zip(data.X, data.y, strict=True)]
        )
        mse_local = _test_mse(data.X_test, data.y_test, local)
    return {
        "settings": asdict(s),
        "dist_fedrep": dist_rep,
        "dist_fedavg": dist_avg,
        "test_mse_fedrep": mse_rep,
        "test_mse_fedavg": mse_avg,
        "test_mse_local": mse_local,
        "noise_floor": s.noise**2,
    }
