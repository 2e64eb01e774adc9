"""Head-only FedAvg's local objective, moment correction, alignment and Gram tracking
against the closed forms of fedsheaf.theory (no MPI)."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedsheaf.algorithms.federated.head.gram import (
    GramTracker,
    direction_error,
    instance_from_rows,
    moment_rows,
)
from fedsheaf.algorithms.federated.head.model import build_ufm_net
from fedsheaf.algorithms.federated.head.objective import (
    align_head_,
    moment_correction_term,
    procrustes_rotation,
    proximal_term,
    target_moments,
    ufm_objective,
)
from fedsheaf.theory.bures import selected_head
from fedsheaf.theory.instances import load_ufm_config
from fedsheaf.theory.psd import sym
from fedsheaf.theory.simulate import SimSettings, simulate
from fedsheaf.theory.ufm import (
    UFMInstance,
    moment_correction,
    moment_correction_grad,
    profiled_grad,
    profiled_objective,
)

torch.set_num_threads(1)
D = torch.float64
LAM_H, LAM_W = 0.05, 0.02


def _problem(seed: int, n: int = 40, C: int = 3, P: int = 5):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(C, P, generator=g, dtype=D)
    Y = torch.randn(n, C, generator=g, dtype=D) @ torch.randn(C, C, generator=g, dtype=D)
    Y = Y + torch.randn(C, generator=g, dtype=D)
    return W, Y


def _optimal_features(W: torch.Tensor, b: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """argmin_H of the UFM objective (rows): (Y − b) W (WᵀW + λ_H I)⁻¹."""
    A = W.T @ W + LAM_H * torch.eye(W.shape[1], dtype=D)
    return torch.linalg.solve(A, W.T @ (Y - b).T).T


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objective_at_optimal_features_is_the_profiled_objective(seed):
    W, Y = _problem(seed)
    mu, Sigma = target_moments(Y)
    b = torch.from_numpy(mu).requires_grad_(True)
    H = _optimal_features(W, b.detach(), Y).requires_grad_(True)
    Wg = W.clone().requires_grad_(True)
    loss = ufm_objective(Wg, b, H, Y, LAM_H, LAM_W)
    assert loss.item() == pytest.approx(
        profiled_objective(W.numpy(), Sigma, LAM_H, LAM_W), rel=1e-12
    )
    loss.backward()
    # H and b are optimal (zero partial gradients), so dL/dW is the profiled gradient.
    assert torch.allclose(H.grad, torch.zeros_like(H), atol=1e-12)
    assert torch.allclose(b.grad, torch.zeros_like(b), atol=1e-12)
    np.testing.assert_allclose(
        Wg.grad.numpy(), profiled_grad(W.numpy(), Sigma, LAM_H, LAM_W), atol=1e-12
    )


def test_objective_gradient_matches_the_closed_form():
    W, Y = _problem(7, n=25)
    g = torch.Generator().manual_seed(8)
    H = torch.randn(25, 5, generator=g, dtype=D).requires_grad_(True)
    b = torch.randn(3, generator=g, dtype=D).requires_grad_(True)
    W_ref = torch.randn(3, 5, generator=g, dtype=D)
    Wg = W.clone().requires_grad_(True)
    rho = 0.3
    loss = ufm_objective(Wg, b, H, Y, LAM_H, LAM_W) + proximal_term(Wg, W_ref, rho)
    loss.backward()
    with torch.no_grad():
        n = Y.shape[0]
        R = H @ W.T + b - Y
        dW = R.T @ H / n + LAM_W * W + rho * (W - W_ref)
        db = R.sum(0) / n
        dH = R @ W / n + LAM_H * H / n
        value = (R**2).sum() / (2 * n) + LAM_H * (H**2).sum() / (2 * n)
        value += LAM_W / 2 * (W**2).sum() + rho / 2 * ((W - W_ref) ** 2).sum()
    assert loss.item() == pytest.approx(float(value), rel=1e-13)
    assert torch.allclose(Wg.grad, dW, atol=1e-12)
    assert torch.allclose(b.grad, db, atol=1e-12)
    assert torch.allclose(H.grad, dH, atol=1e-12)


def _instance(seed: int, M: int = 3, C: int = 3) -> UFMInstance:
    rng = np.random.default_rng(seed)
    Sigmas = []
    for _ in range(M):
        A = rng.normal(size=(C, C))
        Sigmas.append(A @ A.T + 0.5 * np.eye(C))
    p = rng.uniform(0.5, 1.5, size=M)
    return UFMInstance(rng.normal(size=(M, C)), np.stack(Sigmas), p / p.sum(), LAM_H, LAM_W)


@pytest.mark.parametrize("gamma", [1.0, 0.4])
def test_moment_correction_matches_the_theory(gamma):
    inst = _instance(3)
    W = np.random.default_rng(4).normal(size=(3, 6))
    for m in range(inst.M):
        delta = torch.from_numpy(inst.Sigma_cen - inst.Sigmas[m])
        Wt = torch.from_numpy(W).requires_grad_(True)
        term = moment_correction_term(Wt, delta, LAM_H, gamma)
        assert term.item() == pytest.approx(moment_correction(W, inst, m, gamma), rel=1e-12)
        term.backward()
        np.testing.assert_allclose(
            Wt.grad.numpy(), moment_correction_grad(W, inst, m, gamma), atol=1e-12
        )
        # F(W; Σ_m) + C_m(W) = F(W; Σ_cen) at γ = 1 (SPEC §5)
        if gamma == 1.0:
            total = profiled_objective(W, inst.Sigmas[m], LAM_H, LAM_W) + term.item()
            assert total == pytest.approx(
                profiled_objective(W, inst.Sigma_cen, LAM_H, LAM_W), rel=1e-12
            )


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.integers(1, 4), extra=st.integers(0, 4))
def test_procrustes_rotation_is_orthogonal_and_optimal(seed, C, extra):
    rng = np.random.default_rng(seed)
    P = C + extra
    W_hat, W_ref = rng.normal(size=(C, P)), rng.normal(size=(C, P))
    # Lemma 1's closed form inverts Gram roots: a nearly singular head (seed 1123) loses
    # more digits than the tolerance below allows, whatever the rotation
    assume(max(np.linalg.cond(W @ W.T) for W in (W_hat, W_ref)) < 1e6)
    Q = procrustes_rotation(W_hat, W_ref)
    np.testing.assert_allclose(Q.T @ Q, np.eye(P), atol=1e-10)
    best = np.linalg.norm(W_hat @ Q - W_ref)
    for _ in range(20):  # no random orthogonal matrix does better
        R, _ = np.linalg.qr(rng.normal(size=(P, P)))
        assert best <= np.linalg.norm(W_hat @ R - W_ref) + 1e-10
    # the aligned head is the head with Gram ŴŴᵀ closest to W_ref (Lemma 1)
    np.testing.assert_allclose(W_hat @ Q, selected_head(W_ref, W_hat @ W_hat.T), atol=1e-8)


@pytest.mark.parametrize("shape,widths", [((8,), [16, 12]), ((1, 12, 12), [4, 6])])
def test_alignment_keeps_predictions_and_penalties(shape, widths):
    model = build_ufm_net(shape, widths, n_features=6, n_targets=3, seed=5)
    x = torch.randn(20, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before, H_before = model(x), model.representation(x)
    W_hat = model.head.weight.detach().clone()
    bias = model.head.bias.detach().clone()
    W_ref = torch.randn(3, 6, generator=torch.Generator().manual_seed(2))
    Q = align_head_(model.head, model.feature, W_ref)
    with torch.no_grad():
        after, H_after = model(x), model.representation(x)
    W = model.head.weight.detach()
    torch.testing.assert_close(after, before, atol=2e-5, rtol=1e-5)
    assert torch.equal(model.head.bias, bias)
    assert float((H_after**2).sum()) == pytest.approx(float((H_before**2).sum()), rel=1e-5)
    torch.testing.assert_close(W @ W.T, W_hat @ W_hat.T, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(W, (W_hat.double() @ torch.from_numpy(Q)).float())
    assert torch.linalg.norm(W - W_ref) < torch.linalg.norm(W_hat - W_ref)


def test_moment_rows_round_trip_to_the_instance():
    inst = _instance(9, M=4, C=2)
    n = np.array([10, 30, 20, 40])
    rows = np.stack([moment_rows(m, n[m], inst.mus[m], inst.Sigmas[m]) for m in range(4)])
    back = instance_from_rows(rows, LAM_H, LAM_W)
    np.testing.assert_allclose(back.mus, inst.mus)
    np.testing.assert_allclose(back.Sigmas, inst.Sigmas)
    np.testing.assert_allclose(back.p, n / n.sum())
    Y = np.random.default_rng(0).normal(size=(50, 3))
    mu, S = target_moments(torch.from_numpy(Y))
    np.testing.assert_allclose(S, np.cov(Y.T, bias=True), atol=1e-12)
    np.testing.assert_allclose(mu, Y.mean(0))


def _exact_rounds(tracker: GramTracker, W0: np.ndarray, targets: np.ndarray, rounds: int):
    """Server rounds with exact selection Π_m(W_t): what the tracker logs each round."""
    p, W, logs = tracker.inst.p, W0, []
    for _ in range(rounds):
        heads = np.stack([selected_head(W, G) for G in targets])
        W_next = np.tensordot(p, heads, axes=1)
        logs.append(tracker.round(W, np.arange(len(p)), heads, W_next))
        W = W_next
    return logs


def test_gram_logging_matches_the_exact_simulation():
    cfg = load_ufm_config("configs/ufm_fixed.yaml")
    inst, W0 = cfg.instance, cfg.W0
    tracker = GramTracker(inst, 0.0, W0)
    logs = _exact_rounds(tracker, W0, tracker.G_clients, 12)
    sim = simulate(inst, W0, SimSettings(mode="exact", rounds=12))
    got = [r["gram_err_star"] for r in logs]
    np.testing.assert_allclose(got, sim.rel_err_star[1:], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose([r["gram_err_cen"] for r in logs], sim.rel_err_cen[1:], rtol=1e-7)
    assert max(r["delta"] for r in logs) < 1e-12  # uploads are the selected heads
    assert max(r["traj_err"] for r in logs) < 1e-10  # and follow the exact recursion
    assert logs[-1]["gram_err_star"] < 1e-6 and logs[-1]["dir_err_star"] < 1e-6
    assert tracker.errors(W0)["gram_err_star"] == pytest.approx(sim.rel_err_star[0])


def test_trajectory_and_selection_errors_measure_a_server_that_strays():
    """traj_err and delta are not zero by construction: a server whose new head is 1 %
    off the exact recursion, and uploads 1 % off the selected heads, show it."""
    cfg = load_ufm_config("configs/ufm_fixed.yaml")
    inst, W0 = cfg.instance, cfg.W0
    p = inst.p
    clients = np.arange(len(p))
    heads = np.stack([selected_head(W0, G) for G in GramTracker(inst, 0.0, W0).G_clients])
    exact = GramTracker(inst, 0.0, W0).round(W0, clients, heads, np.tensordot(p, heads, 1))
    assert exact["traj_err"] < 1e-10 and exact["delta"] < 1e-12
    off = GramTracker(inst, 0.0, W0).round(
        W0, clients, 1.01 * heads, np.tensordot(p, 1.01 * heads, axes=1)
    )
    assert off["traj_err"] == pytest.approx(1.01**2 - 1, rel=1e-6)  # G scaled by 1.0201
    norms = np.array([np.linalg.norm(h) for h in heads]) / np.linalg.norm(W0)
    assert off["delta"] == pytest.approx(0.01 * float(p @ norms), rel=1e-6)


def test_full_moment_correction_reaches_g_cen_in_one_logged_round():
    cfg = load_ufm_config("configs/ufm_fixed.yaml")
    tracker = GramTracker(cfg.instance, 1.0, cfg.W0)
    np.testing.assert_allclose(tracker.G_pred, tracker.G_cen, atol=1e-10)
    logs = _exact_rounds(tracker, cfg.W0, tracker.G_targets, 2)
    assert logs[0]["gram_err_cen"] < 1e-10 and logs[0]["gram_err_pred"] < 1e-10
    assert logs[0]["gram_err_star"] > 0.05  # the uncorrected limit is elsewhere


def test_direction_error_ignores_scale():
    G = sym(np.random.default_rng(1).normal(size=(3, 3))) + 4 * np.eye(3)
    assert direction_error(3.0 * G, G) == pytest.approx(0.0, abs=1e-15)
    assert direction_error(G, np.eye(3)) > 0
