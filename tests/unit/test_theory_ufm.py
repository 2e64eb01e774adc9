"""Federated UFM closed forms: φ, gap decomposition, moment correction, profiled objective."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.bures import bw_distance_sq
from fedsheaf.theory.exceptions import NotFullyActiveError
from fedsheaf.theory.instances import (
    load_instance,
    load_ufm_config,
    parse_ufm_config,
    random_instance,
    random_orthogonal,
)
from fedsheaf.theory.psd import rel_err, sqrtm_psd, sym
from fedsheaf.theory.ufm import (
    UFMInstance,
    client_grams,
    corrected_targets,
    g_cen,
    gap_decomposition,
    moment_correction,
    moment_correction_grad,
    phi,
    profiled_grad,
    profiled_objective,
)
from fedsheaf.util.errors import ConfigError

FIXED = Path(__file__).resolve().parents[2] / "configs" / "ufm_fixed.yaml"
SETTINGS = settings(max_examples=40, deadline=None)
instances = st.builds(
    random_instance,
    seed=st.integers(0, 2**32 - 1),
    C=st.integers(2, 4),
    M=st.integers(1, 5),
    mean_scale=st.sampled_from([0.0, 0.5, 2.0]),
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


def is_psd(A: np.ndarray, tol: float = 1e-10) -> bool:
    return bool(np.linalg.eigvalsh(sym(A))[0] >= -tol * max(1.0, np.abs(A).max()))


@SETTINGS
@given(instances)
def test_gap_terms_psd_and_sum(inst: UFMInstance) -> None:
    gap = gap_decomposition(inst)
    for M in (gap.M_mu, gap.M_Sigma, gap.M_A):
        assert is_psd(M)
    total = gap.M_mu + gap.M_Sigma + gap.M_A
    assert np.allclose(total, gap.G_cen - gap.G_star, atol=1e-12)
    assert np.allclose(gap.G_cen, g_cen(inst))


@SETTINGS
@given(instances)
def test_trace_of_averaging_term_is_bw_variance(inst: UFMInstance) -> None:
    gap = gap_decomposition(inst)
    var = sum(
        pm * bw_distance_sq(gap.G_star, Gm) for pm, Gm in zip(inst.p, gap.G_clients, strict=True)
    )
    assert np.trace(gap.M_A) == pytest.approx(var, rel=1e-8, abs=1e-11)
    assert gap.traces["M_A"] == pytest.approx(gap.bw_variance, rel=1e-8, abs=1e-11)


@SETTINGS
@given(instances)
def test_phi_is_the_stationary_gram(inst: UFMInstance) -> None:
    lam_H, lam_W = inst.lam_H, inst.lam_W
    for T, G in zip(inst.Sigmas, client_grams(inst), strict=True):
        A = G + lam_H * np.eye(inst.C)
        assert rel_err(A @ A, (lam_H / lam_W) * T) < 1e-10
        # Any head with Gram φ(T) is a critical point of F(·; T); perturbations do not lower F.
        W = sqrtm_psd(G) @ random_orthogonal(np.random.default_rng(0), inst.C)
        assert np.linalg.norm(profiled_grad(W, T, lam_H, lam_W)) < 1e-9
        f0 = profiled_objective(W, T, lam_H, lam_W)
        rng = np.random.default_rng(1)
        for _ in range(3):
            D = rng.standard_normal(W.shape)
            W2 = W + 1e-3 * D / np.linalg.norm(D)
            assert profiled_objective(W2, T, lam_H, lam_W) >= f0 - 1e-12


@SETTINGS
@given(instances, st.integers(0, 3))
def test_profiled_gradient_matches_finite_differences(inst: UFMInstance, extra: int) -> None:
    rng = np.random.default_rng(inst.M * 31 + extra)
    W = rng.standard_normal((inst.C, inst.C + extra))
    T = inst.Sigmas[0]
    g = profiled_grad(W, T, inst.lam_H, inst.lam_W)
    h = 1e-6
    fd = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[idx] = h
        fp = profiled_objective(W + E, T, inst.lam_H, inst.lam_W)
        fm = profiled_objective(W - E, T, inst.lam_H, inst.lam_W)
        fd[idx] = (fp - fm) / (2 * h)
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-7)


@SETTINGS
@given(instances, st.floats(0.0, 1.0))
def test_moment_correction_shifts_the_target(inst: UFMInstance, gamma: float) -> None:
    rng = np.random.default_rng(inst.C)
    W = rng.standard_normal((inst.C, inst.C + 1))
    targets = corrected_targets(inst, gamma)
    for m in range(inst.M):
        lhs = profiled_objective(W, inst.Sigmas[m], inst.lam_H, inst.lam_W)
        lhs += moment_correction(W, inst, m, gamma)
        rhs = profiled_objective(W, targets[m], inst.lam_H, inst.lam_W)
        assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12)
        g = profiled_grad(W, inst.Sigmas[m], inst.lam_H, inst.lam_W)
        g += moment_correction_grad(W, inst, m, gamma)
        assert np.allclose(g, profiled_grad(W, targets[m], inst.lam_H, inst.lam_W), atol=1e-12)
    full = client_grams(inst, gamma=1.0)
    for Gm in full:
        assert np.allclose(Gm, g_cen(inst), atol=1e-12)


def test_sigma_cen_is_the_pooled_covariance() -> None:
    rng = np.random.default_rng(5)
    Ns = [40, 25, 60]
    Ys = [rng.standard_normal((3, n)) * (m + 1) + m for m, n in enumerate(Ns)]
    mus = np.stack([Y.mean(axis=1) for Y in Ys])
    Sigmas = np.stack([np.cov(Y, bias=True) for Y in Ys])
    inst = UFMInstance(mus, Sigmas, np.array(Ns) / sum(Ns), 0.1, 0.1)
    pooled = np.hstack(Ys)
    assert np.allclose(inst.Sigma_cen, np.cov(pooled, bias=True), atol=1e-12)
    assert np.allclose(inst.mu_g, pooled.mean(axis=1))


def test_phi_raises_outside_fully_active_regime() -> None:
    T = np.diag([1.0, 0.005])
    with pytest.raises(NotFullyActiveError, match="my matrix"):
        phi(T, 0.1, 0.1, name="my matrix")
    with pytest.raises(ConfigError, match="fully active"):
        phi(np.diag([1.0, 0.01]), 0.1, 0.1)  # boundary: λ_min = λ_H λ_W is excluded
    assert np.all(np.isfinite(phi(np.diag([1.0, 0.0101]), 0.1, 0.1)))


def test_client_outside_regime_is_named() -> None:
    inst = UFMInstance(
        np.zeros((3, 2)),
        np.stack([np.eye(2), np.diag([1.0, 0.001]), np.eye(2)]),
        np.ones(3) / 3,
        0.1,
        0.1,
    )
    with pytest.raises(NotFullyActiveError, match=r"clients\[1\]"):
        client_grams(inst)


def test_fixed_instance_matches_paper() -> None:
    inst = load_instance(FIXED)
    assert inst.M == 3 and inst.C == 2
    assert np.allclose(inst.p, 1 / 3)
    gap = gap_decomposition(inst)
    # Seed 002, App. D.1: traces 1.02, 2.90e-1, 1.93e-1; relative gap 5.78e-1.
    assert gap.traces["M_mu"] == pytest.approx(1.02, abs=5e-3)
    assert gap.traces["M_Sigma"] == pytest.approx(0.290, abs=5e-4)
    assert gap.traces["M_A"] == pytest.approx(0.193, abs=5e-4)
    assert gap.relative_gap == pytest.approx(0.578, abs=5e-4)


def test_fixed_config_initial_head() -> None:
    cfg = load_ufm_config(FIXED)
    c, s = np.cos(np.deg2rad(100)), np.sin(np.deg2rad(100))
    R = np.array([[c, -s], [s, c]])
    G0 = R @ np.diag([2.5, 0.09]) @ R.T
    assert np.allclose(cfg.W0 @ cfg.W0.T, G0)
    assert np.allclose(cfg.W0, cfg.W0.T)  # W_0 = G_0^{1/2}
    assert cfg.settings.mode == "exact"


def _raw() -> dict:
    return {
        "lam_H": 0.1,
        "lam_W": 0.1,
        "clients": [
            {"mean": [0.0, 1.0], "cov": [[1.0, 0.2], [0.2, 0.5]]},
            {"mean": [1.0, 0.0], "cov": {"rotation_deg": 30, "eigenvalues": [2.0, 0.3]}},
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: r.update(extra=1), "'extra'"),
        (lambda r: r["clients"][1].update(colour="red"), "clients[1]: unknown key 'colour'"),
        (lambda r: r.update(simulation={"rounds": 3, "rhoo": 1}), "'rhoo'"),
        (lambda r: r.update(init={"grams": [[1, 0], [0, 1]]}), "'grams'"),
        (lambda r: r["clients"][0].update(cov=[[1.0, 0.0], [0.0, 0.001]]), "clients[0]"),
        (lambda r: r["clients"][1].update(mean=[1.0]), "clients[1].mean"),
        (lambda r: r["clients"][0].update(weight=-1), "clients[0].weight"),
        (lambda r: r.update(lam_H="big"), "lam_H"),
        (lambda r: r.update(simulation={"mode": "magic"}), "simulation.mode"),
        (lambda r: r.update(simulation={"gamma": 1.5}), "simulation.gamma"),
        (lambda r: r.pop("clients"), "'clients'"),
    ],
)
def test_config_validation_names_the_key(mutate, needle: str) -> None:
    raw = _raw()
    mutate(raw)
    with pytest.raises(ConfigError) as info:
        parse_ufm_config(raw, source="test.yaml")
    assert needle in str(info.value)
    assert str(info.value).startswith("test.yaml")


def test_config_accepts_yaml_exponent_strings(tmp_path: Path) -> None:
    path = tmp_path / "u.yaml"
    path.write_text(
        "lam_H: 1e-1\nlam_W: 0.1\nclients:\n  - {mean: [0, 0], cov: [[1, 0], [0, 1]]}\n"
        "simulation: {rho: 1e-3, mode: proximal}\n"
    )
    cfg = load_ufm_config(path)
    assert cfg.instance.lam_H == 0.1 and cfg.settings.rho == 1e-3
    assert np.allclose(cfg.W0, np.eye(2))


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_ufm_config(tmp_path / "nope.yaml")
