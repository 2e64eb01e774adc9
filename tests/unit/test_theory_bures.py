"""Bures–Wasserstein geometry: distances, transport maps, selection, barycenter."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.bures import (
    barycenter,
    bw_distance,
    bw_distance_sq,
    gram_step,
    selected_head,
    transport_map,
)
from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.instances import random_orthogonal
from fedsheaf.theory.psd import inv_sqrtm_pd, rel_err, sqrt_and_inv_sqrt, sqrtm_psd, sym
from fedsheaf.util.errors import FedsheafError

SETTINGS = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**32 - 1)
dims = st.integers(2, 4)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


def spd(rng: np.random.Generator, C: int, lo: float = 0.05, hi: float = 3.0) -> np.ndarray:
    Q = random_orthogonal(rng, C)
    return sym((Q * rng.uniform(lo, hi, size=C)) @ Q.T)


def spd_family(seed: int, C: int, M: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Gs = np.stack([spd(rng, C) for _ in range(M)])
    w = rng.uniform(0.2, 1.0, size=M)
    return Gs, w / w.sum()


@SETTINGS
@given(seeds, dims)
def test_psd_roots(seed: int, C: int) -> None:
    A = spd(np.random.default_rng(seed), C)
    r, ri = sqrt_and_inv_sqrt(A)
    assert np.allclose(r @ r, A, atol=1e-12)
    assert np.allclose(r @ ri, np.eye(C), atol=1e-10)
    assert np.allclose(inv_sqrtm_pd(A), ri)
    assert np.allclose(sqrtm_psd(A), r)


def test_inverse_sqrt_rejects_singular() -> None:
    with pytest.raises(ValueError, match="not positive definite"):
        inv_sqrtm_pd(np.diag([1.0, 0.0]))


@SETTINGS
@given(seeds, dims)
def test_bw_distance_symmetric_and_zero_on_equal(seed: int, C: int) -> None:
    rng = np.random.default_rng(seed)
    A, B = spd(rng, C), spd(rng, C)
    assert bw_distance_sq(A, B) == pytest.approx(bw_distance_sq(B, A), rel=1e-9, abs=1e-12)
    assert bw_distance(A, A) < 1e-6
    assert bw_distance_sq(A, A) < 1e-12
    assert bw_distance(A, B) > 0


@SETTINGS
@given(seeds, dims)
def test_bw_distance_commuting_closed_form(seed: int, C: int) -> None:
    rng = np.random.default_rng(seed)
    Q = random_orthogonal(rng, C)
    a, b = rng.uniform(0.01, 4.0, size=C), rng.uniform(0.01, 4.0, size=C)
    A, B = (Q * a) @ Q.T, (Q * b) @ Q.T
    expected = float(np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    assert bw_distance_sq(A, B) == pytest.approx(expected, rel=1e-9, abs=1e-12)


@SETTINGS
@given(seeds, dims)
def test_bw_triangle_inequality(seed: int, C: int) -> None:
    rng = np.random.default_rng(seed)
    A, B, D = spd(rng, C), spd(rng, C), spd(rng, C)
    assert bw_distance(A, D) <= bw_distance(A, B) + bw_distance(B, D) + 1e-9


@SETTINGS
@given(seeds, dims)
def test_transport_map_pushes_forward(seed: int, C: int) -> None:
    rng = np.random.default_rng(seed)
    G, Gm = spd(rng, C), spd(rng, C)
    T = transport_map(G, Gm)
    assert np.allclose(T, T.T)
    assert np.linalg.eigvalsh(T)[0] > 0
    assert rel_err(T @ G @ T, Gm) < 1e-9


@SETTINGS
@given(seeds, dims, st.integers(0, 3))
def test_selected_head_gram_and_distance(seed: int, C: int, extra: int) -> None:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((C, C + extra)) + 2.0 * np.eye(C, C + extra)
    Gm = spd(rng, C)
    U = selected_head(W, Gm)
    assert U.shape == W.shape
    assert rel_err(U @ U.T, Gm) < 1e-9
    dist2 = float(np.sum((U - W) ** 2))
    assert dist2 == pytest.approx(bw_distance_sq(W @ W.T, Gm), rel=1e-7, abs=1e-10)
    # Every other head with Gram G_m, U' = U Q for orthogonal Q, is at least as far from W.
    for _ in range(5):
        Q = random_orthogonal(rng, C + extra)
        assert np.sum((U @ Q - W) ** 2) >= dist2 - 1e-9


@SETTINGS
@given(seeds, dims, st.integers(1, 5))
def test_gram_step_is_gram_of_averaged_selected_heads(seed: int, C: int, M: int) -> None:
    Gs, p = spd_family(seed, C, M)
    W = np.random.default_rng(seed + 1).standard_normal((C, C + 1)) + np.eye(C, C + 1)
    W_next = sum(pm * selected_head(W, Gm) for pm, Gm in zip(p, Gs, strict=True))
    assert rel_err(W_next @ W_next.T, gram_step(W @ W.T, Gs, p)) < 1e-9


@SETTINGS
@given(seeds, dims, st.integers(1, 5))
def test_barycenter_fixed_point(seed: int, C: int, M: int) -> None:
    Gs, p = spd_family(seed, C, M)
    G, iters = barycenter(Gs, p)
    assert iters >= 1
    r = sqrtm_psd(G)
    fixed = sum(pm * sqrtm_psd(r @ Gm @ r) for pm, Gm in zip(p, Gs, strict=True))
    assert rel_err(fixed, G) < 1e-10
    S = sum(pm * transport_map(G, Gm) for pm, Gm in zip(p, Gs, strict=True))
    assert np.allclose(S, np.eye(C), atol=1e-9)


@SETTINGS
@given(seeds, dims, st.integers(2, 4))
def test_barycenter_minimises_bw_objective(seed: int, C: int, M: int) -> None:
    Gs, p = spd_family(seed, C, M)
    G = barycenter(Gs, p).G

    def objective(X: np.ndarray) -> float:
        return sum(pm * bw_distance_sq(X, Gm) for pm, Gm in zip(p, Gs, strict=True))

    base = objective(G)
    rng = np.random.default_rng(seed + 7)
    for _ in range(5):
        E = sym(rng.standard_normal((C, C)))
        X = G + 1e-3 * E / np.linalg.norm(E)
        assert objective(X) >= base - 1e-12


@SETTINGS
@given(seeds, dims, st.integers(1, 4))
def test_barycenter_commuting_closed_form(seed: int, C: int, M: int) -> None:
    rng = np.random.default_rng(seed)
    Q = random_orthogonal(rng, C)
    eig = rng.uniform(0.05, 3.0, size=(M, C))
    Gs = np.stack([(Q * e) @ Q.T for e in eig])
    w = rng.uniform(0.2, 1.0, size=M)
    p = w / w.sum()
    expected = (Q * (p @ np.sqrt(eig)) ** 2) @ Q.T
    G0 = spd(rng, C)  # start away from the commuting family
    assert rel_err(barycenter(Gs, p, G0=G0).G, expected) < 1e-10


def test_barycenter_reports_non_convergence() -> None:
    Gs, p = spd_family(3, 3, 3)
    with pytest.raises(ConvergenceError, match="max_iter=1") as info:
        barycenter(Gs, p, tol=1e-15, max_iter=1, G0=np.eye(3) * 10)
    assert isinstance(info.value, FedsheafError)


def test_weights_are_validated() -> None:
    Gs, _ = spd_family(0, 2, 2)
    with pytest.raises(ValueError, match="sum to one"):
        barycenter(Gs, np.array([0.5, 0.6]))
