import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import orthogonal_procrustes

from fedsheaf.sheaf.maps import (
    PilotWindow,
    random_stiefel,
    stiefel_map,
    stiefel_map_from_cross,
    transport,
)

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=F64)


def assert_stiefel(v: torch.Tensor, atol: float = 1e-10) -> None:
    assert torch.isfinite(v).all()
    eye = torch.eye(v.shape[1], dtype=v.dtype)
    torch.testing.assert_close(v.T @ v, eye, atol=atol, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    d_t=st.integers(1, 8),
    extra=st.integers(0, 6),
    k=st.integers(1, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_stiefel_map_orthonormal(d_t: int, extra: int, k: int, seed: int) -> None:
    d_h = d_t + extra
    v = stiefel_map(randn(d_h, k, seed=seed), randn(d_t, k, seed=seed + 1))
    assert v.shape == (d_h, d_t)
    assert_stiefel(v)


@pytest.mark.parametrize("d_h,d_t,k", [(6, 3, 20), (5, 5, 12), (9, 4, 4)])
def test_stiefel_map_beats_random_stiefel(d_h: int, d_t: int, k: int) -> None:
    a_head, a_tail = randn(d_h, k, seed=1), randn(d_t, k, seed=2)
    best = torch.linalg.matrix_norm(a_head - stiefel_map(a_head, a_tail, jitter=0) @ a_tail)
    g = gen(3)
    for _ in range(200):
        v = random_stiefel(d_h, d_t, g, dtype=F64)
        assert best <= torch.linalg.matrix_norm(a_head - v @ a_tail) + 1e-12


def test_stiefel_map_recovers_planted_map() -> None:
    v_star = random_stiefel(7, 4, gen(0), dtype=F64)
    a_tail = randn(4, 12, seed=1)
    v = stiefel_map(v_star @ a_tail, a_tail, jitter=0)
    torch.testing.assert_close(v, v_star, atol=1e-12, rtol=0)
    # The default tie-break jitter only biases at O(jitter · condition number).
    v = stiefel_map(v_star @ a_tail, a_tail)
    torch.testing.assert_close(v, v_star, atol=1e-4, rtol=0)


def test_equal_dims_is_procrustes() -> None:
    a_head, a_tail = randn(5, 15, seed=4), randn(5, 15, seed=5)
    o = stiefel_map(a_head, a_tail, jitter=0)
    # scipy: argmin_R ‖A R − B‖ ⇒ with A = a_tailᵀ, B = a_headᵀ, O = Rᵀ.
    r, _ = orthogonal_procrustes(a_tail.T.numpy(), a_head.T.numpy())
    np.testing.assert_allclose(o.numpy(), r.T, atol=1e-12)
    assert_stiefel(o)


def test_zero_and_rank_deficient_are_finite_and_orthonormal() -> None:
    v = stiefel_map_from_cross(torch.zeros(6, 4, dtype=F64))
    assert_stiefel(v)
    torch.testing.assert_close(v, torch.eye(6, 4, dtype=F64))
    for jitter in (1e-6, 0.0):
        v = stiefel_map(randn(6, 2, seed=7), randn(4, 2, seed=8), jitter=jitter)  # K < d_t
        assert_stiefel(v)
    # float32 in, float32 out
    v = stiefel_map(randn(6, 2, seed=7).float(), randn(4, 2, seed=8).float())
    assert v.dtype == torch.float32
    assert_stiefel(v.double(), atol=1e-6)


def test_rank_deficient_fit_still_optimal_on_informative_directions() -> None:
    # With K < d_t the fit must still map the observed pilots as well as possible.
    v_star = random_stiefel(6, 4, gen(9), dtype=F64)
    a_tail = randn(4, 2, seed=10)
    v = stiefel_map(v_star @ a_tail, a_tail)
    torch.testing.assert_close(v @ a_tail, v_star @ a_tail, atol=1e-5, rtol=0)


def test_non_finite_and_bad_shapes_raise() -> None:
    m = torch.zeros(3, 2)
    m[0, 0] = float("nan")
    with pytest.raises(ValueError):
        stiefel_map_from_cross(m)
    with pytest.raises(ValueError):
        stiefel_map_from_cross(torch.ones(2, 3))
    with pytest.raises(ValueError):
        stiefel_map(torch.ones(3, 4), torch.ones(2, 5))


def test_strict_privacy_fits_are_stiefel_maps() -> None:
    """Algorithms 3/4: argmin_O ‖O x − y‖ over O(d) (full SVD) and argmin_V ‖x − V y‖
    over St (thin) are both the closed form stiefel_map(target, source)."""
    o_star = random_stiefel(5, 5, gen(11), dtype=F64)
    x = randn(5, 9, seed=12)
    torch.testing.assert_close(stiefel_map(o_star @ x, x, jitter=0), o_star, atol=1e-12, rtol=0)
    y = randn(5, 9, seed=13)  # for arbitrary y no rotation does better
    best = torch.linalg.matrix_norm(stiefel_map(y, x) @ x - y)
    for k in range(50):
        q = random_stiefel(5, 5, gen(k + 100), dtype=F64)
        assert best <= torch.linalg.matrix_norm(q @ x - y) + 1e-9
    v_star = random_stiefel(5, 3, gen(14), dtype=F64)
    y3 = randn(3, 9, seed=15)
    torch.testing.assert_close(stiefel_map(v_star @ y3, y3, jitter=0), v_star, atol=1e-12, rtol=0)


def test_transport_directions() -> None:
    v = random_stiefel(5, 3, gen(16), dtype=F64)
    z_tail = randn(4, 3, seed=17)  # batch-first
    z_head = randn(4, 5, seed=18)
    torch.testing.assert_close(transport(z_tail, v, receiver_is_head=True), (v @ z_tail.T).T)
    torch.testing.assert_close(transport(z_head, v, receiver_is_head=False), (v.T @ z_head.T).T)
    # head → tail → head is the identity on the image of V
    round_trip = transport(transport(z_tail, v, True), v, False)
    torch.testing.assert_close(round_trip, z_tail)
    with pytest.raises(ValueError):
        transport(z_head, v, receiver_is_head=True)


def test_random_stiefel_is_seeded() -> None:
    a = random_stiefel(6, 3, gen(1), dtype=F64)
    b = random_stiefel(6, 3, gen(1), dtype=F64)
    assert torch.equal(a, b)
    assert_stiefel(a)


def test_pilot_window_equals_concatenated_fit() -> None:
    window = PilotWindow()
    heads = [randn(6, 3, seed=s) for s in range(5)]
    tails = [randn(4, 3, seed=100 + s) for s in range(5)]
    for a_h, a_t in zip(heads, tails, strict=True):
        window.add("j", a_h, a_t)
        window.add(7, a_h[:4], a_t)  # a second neighbour with its own accumulator
    assert window.samples("j") == 15
    assert window.samples(7) == 15
    concat = stiefel_map(torch.cat(heads, dim=1), torch.cat(tails, dim=1))
    torch.testing.assert_close(window.fit("j"), concat, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        window.cross("j"), torch.cat(heads, 1) @ torch.cat(tails, 1).T, atol=1e-12, rtol=0
    )
    assert window.fit(7).shape == (4, 4)
    window.reset()
    assert window.samples("j") == 0
    with pytest.raises(KeyError):
        window.fit("j")
    with pytest.raises(ValueError):
        window.add("j", randn(3, 3, seed=0), randn(4, 3, seed=1))  # tail first


def test_maps_carry_no_grad() -> None:
    a = randn(4, 6, seed=0).requires_grad_()
    b = randn(3, 6, seed=1).requires_grad_()
    assert not stiefel_map(a, b).requires_grad
