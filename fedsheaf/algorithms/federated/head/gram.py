"""The server's view of head-only FedAvg: the shared Gram against the theory (numpy only).

From the clients' target moments (one exchange before the first round) the
server builds the federated UFM instance (p_m = N_m / N) and, with
:mod:`fedsheaf.theory`, the reference Grams:

* ``G_⋆``: BW barycenter of ``G_m = φ(Σ_m)`` (ordinary selection's limit);
* ``G_cen = φ(Σ_cen)`` (centralized training; the limit under full correction);
* ``G_pred``: barycenter of the Grams the clients actually target,
  ``φ((1−γ)Σ_m + γΣ_cen)`` -- ``G_⋆`` at γ = 0, ``G_cen`` at γ = 1.

Every round it records, for the new server Gram ``G = W Wᵀ``:

* ``gram_err_{star,cen,pred}`` -- relative error ``‖G − G_ref‖_F / ‖G_ref‖_F``;
* ``dir_err_{star,cen,pred}`` -- direction error ``‖G/‖G‖_F − G_ref/‖G_ref‖_F‖_F``
  (seed 002, App. E.4; insensitive to the Gram's overall scale);
* ``traj_err`` -- ``‖G − G^rec‖_F/‖G^rec‖_F`` against the exact Gram recursion (9)
  run from the same ``G_0`` over the same selected clients (renormalised weights);
* ``delta`` -- distance of the uploads to the selected heads,
  ``Σ_m p̃_m ‖W̃_m − Π_m(W_t)‖_F / ‖W_t‖_F`` over the round's clients, ``p̃`` their
  renormalised weights and ``Π_m(W_t) = T_m(G_t) W_t`` the optimal head of the
  client's (corrected) objective closest to the broadcast (Lemma 1);
* ``local_err`` -- ``Σ_m p̃_m ‖W̃_m W̃_mᵀ − G_m‖_F/‖G_m‖_F``: how far local training
  got from each client's optimal Gram (the target of its own, corrected, objective);
* ``bias_err`` -- ``‖b − μ_g‖`` (the optimal aggregate bias is the pooled target mean).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsheaf.theory.bures import barycenter, gram_step, selected_head
from fedsheaf.theory.psd import rel_err
from fedsheaf.theory.ufm import UFMInstance, client_grams, g_cen

__all__ = ["GramTracker", "direction_error", "instance_from_rows", "moment_rows"]


def direction_error(G: np.ndarray, G_ref: np.ndarray) -> float:
    """``‖G/‖G‖_F − G_ref/‖G_ref‖_F‖_F``."""
    return float(np.linalg.norm(G / np.linalg.norm(G) - G_ref / np.linalg.norm(G_ref)))


def moment_rows(client: int, n: int, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """One client's setup row ``[client, N_m, μ_m (C), Σ_m (C², row-major)]``."""
    return np.concatenate([[client, n], mu, np.asarray(sigma).reshape(-1)]).astype(np.float64)


def instance_from_rows(rows: np.ndarray, lam_H: float, lam_W: float) -> UFMInstance:
    """The federated UFM of rows from :func:`moment_rows` (client-id order), ``p_m = N_m/N``."""
    rows = np.asarray(rows, dtype=np.float64)
    C = int(round((np.sqrt(4 * (rows.shape[1] - 2) + 1) - 1) / 2))
    if rows.shape[1] != 2 + C + C * C:
        raise ValueError(f"moment rows have {rows.shape[1]} columns, not 2 + C + C² for any C")
    n = rows[:, 1]
    return UFMInstance(
        mus=rows[:, 2 : 2 + C],
        Sigmas=rows[:, 2 + C :].reshape(-1, C, C),
        p=n / n.sum(),
        lam_H=lam_H,
        lam_W=lam_W,
    )


class GramTracker:
    """Reference Grams of ``inst`` and the per-round errors of the server's head.

    Parameters
    ----------
    inst:
        Client moments, weights and penalties.
    gamma:
        Moment-correction scale the clients use.
    W0:
        The initial shared head ``(C, P)`` (starts the exact recursion).
    """

    def __init__(self, inst: UFMInstance, gamma: float, W0: np.ndarray) -> None:
        self.inst, self.gamma = inst, float(gamma)
        self.G_clients = client_grams(inst)
        self.G_star = barycenter(self.G_clients, inst.p).G
        self.G_cen = g_cen(inst)
        self.G_targets = client_grams(inst, self.gamma) if self.gamma else self.G_clients
        self.G_pred = barycenter(self.G_targets, inst.p).G if self.gamma else self.G_star
        W0 = np.asarray(W0, dtype=np.float64)
        self.G_rec = W0 @ W0.T

    def errors(self, W: np.ndarray, b: np.ndarray | None = None) -> dict[str, float]:
        """Errors of the head ``W`` (and bias ``b``) against the reference Grams."""
        W = np.asarray(W, dtype=np.float64)
        G = W @ W.T
        out: dict[str, float] = {}
        for name, ref in (("star", self.G_star), ("cen", self.G_cen), ("pred", self.G_pred)):
            out[f"gram_err_{name}"] = rel_err(G, ref)
            out[f"dir_err_{name}"] = direction_error(G, ref)
        out["traj_err"] = rel_err(G, self.G_rec)
        if b is not None:
            out["bias_err"] = float(np.linalg.norm(np.asarray(b, np.float64) - self.inst.mu_g))
        return out

    def round(
        self,
        W_t: np.ndarray,
        clients: np.ndarray,
        heads: np.ndarray,
        W_next: np.ndarray,
        b_next: np.ndarray | None = None,
    ) -> dict[str, float]:
        """Advance the exact recursion over ``clients`` and score the new head ``W_next``.

        ``heads`` ``(k, C, P)`` are the uploads of ``clients`` (same order) in a round
        that broadcast ``W_t``.
        """
        W_t = np.asarray(W_t, dtype=np.float64)
        idx = np.asarray(clients, dtype=np.int64)
        w = self.inst.p[idx] / self.inst.p[idx].sum()
        targets = self.G_targets[idx]
        self.G_rec = gram_step(self.G_rec, targets, w)
        heads = np.asarray(heads, dtype=np.float64)
        dist = sum(
            wk * np.linalg.norm(Wm - selected_head(W_t, Gm))
            for wk, Wm, Gm in zip(w, heads, targets, strict=True)
        )
        local = sum(
            wk * rel_err(Wm @ Wm.T, Gm) for wk, Wm, Gm in zip(w, heads, targets, strict=True)
        )
        return {
            "delta": float(dist / np.linalg.norm(W_t)),
            "local_err": float(local),
            **self.errors(W_next, b_next),
        }

    def references(self) -> dict[str, Any]:
        """The reference Grams and client Grams, JSON-ready."""
        return {
            "G_star": self.G_star.tolist(),
            "G_cen": self.G_cen.tolist(),
            "G_pred": self.G_pred.tolist(),
            "G_clients": self.G_clients.tolist(),
            "p": self.inst.p.tolist(),
            "gamma": self.gamma,
            "relative_gap_star_cen": rel_err(self.G_star, self.G_cen),
        }
