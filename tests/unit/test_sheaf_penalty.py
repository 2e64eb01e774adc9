import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.sheaf.maps import random_stiefel, stiefel_map
from fedsheaf.sheaf.penalty import (
    agent_lambda,
    penalty_gradient_closed_form,
    sheaf_penalty,
    transported_penalty,
)

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=F64)


def autograd_grad(a_own: torch.Tensor, neighbours, lam: float) -> torch.Tensor:
    a = a_own.clone().requires_grad_()
    (g,) = torch.autograd.grad(sheaf_penalty(a, neighbours, lam), a)
    return g


def mixed_neighbourhood(d_i: int, k: int, seed: int):
    """Agent i (dim d_i) with two tails (smaller dims) and two heads (larger dims)."""
    nbrs = []
    for n, d_j in enumerate([max(1, d_i - 2), 1, d_i + 3, d_i]):
        own_is_head = d_j < d_i or (d_j == d_i and n % 2 == 0)
        shape = (d_i, d_j) if own_is_head else (d_j, d_i)
        v = random_stiefel(*shape, gen(seed + 10 * n), dtype=F64)
        nbrs.append((randn(d_j, k, seed=seed + 10 * n + 1), v, own_is_head))
    return nbrs


@settings(max_examples=20, deadline=None)
@given(d_i=st.integers(2, 7), k=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_autograd_matches_closed_form(d_i: int, k: int, seed: int) -> None:
    a_own = randn(d_i, k, seed=seed + 5)
    nbrs = mixed_neighbourhood(d_i, k, seed)
    lam = agent_lambda(0.3, d_i)
    torch.testing.assert_close(
        autograd_grad(a_own, nbrs, lam),
        penalty_gradient_closed_form(a_own, nbrs, lam),
        atol=1e-12,
        rtol=1e-10,
    )


@pytest.mark.parametrize("own_is_head", [True, False])
def test_single_edge_gradients(own_is_head: bool) -> None:
    d_big, d_small, k, lam = 6, 3, 10, 0.7
    v = random_stiefel(d_big, d_small, gen(1), dtype=F64)
    d_own, d_j = (d_big, d_small) if own_is_head else (d_small, d_big)
    a_own, a_j = randn(d_own, k, seed=2), randn(d_j, k, seed=3)
    nbrs = [(a_j, v, own_is_head)]
    g = autograd_grad(a_own, nbrs, lam)
    if own_is_head:
        exact = (lam / k) * (a_own - v @ a_j)
    else:
        exact = -(lam / k) * v.T @ (a_j - v @ a_own)  # literal derivative of the tail residual
    torch.testing.assert_close(g, exact, atol=1e-13, rtol=0)
    torch.testing.assert_close(
        g, penalty_gradient_closed_form(a_own, nbrs, lam), atol=1e-13, rtol=0
    )


def test_tail_closed_form_needs_stiefel_map() -> None:
    # The (a_own − Vᵀ a_j) form relies on VᵀV = I; a non-orthonormal V breaks it.
    k, lam = 8, 1.0
    v = 2.0 * random_stiefel(5, 3, gen(4), dtype=F64)
    a_own, a_j = randn(3, k, seed=5), randn(5, k, seed=6)
    nbrs = [(a_j, v, False)]
    assert not torch.allclose(
        autograd_grad(a_own, nbrs, lam), penalty_gradient_closed_form(a_own, nbrs, lam)
    )


def test_value_residual_in_head_space() -> None:
    k, lam = 4, 0.5
    v = random_stiefel(5, 2, gen(7), dtype=F64)
    a_own, a_j = randn(2, k, seed=8), randn(5, k, seed=9)  # own is the tail
    value = sheaf_penalty(a_own, [(a_j, v, False)], lam)
    expected = lam / (2 * k) * ((a_j - v @ a_own) ** 2).sum()
    torch.testing.assert_close(value, expected)
    # Not the projected (tail-space) residual, which would be smaller.
    projected = lam / (2 * k) * ((v.T @ a_j - a_own) ** 2).sum()
    assert value > projected


def test_zero_when_aligned() -> None:
    v = random_stiefel(6, 4, gen(10), dtype=F64)
    a_tail = randn(4, 9, seed=11)
    a_head = v @ a_tail
    assert sheaf_penalty(a_head, [(a_tail, v, True)], 1.0).abs() < 1e-12
    assert sheaf_penalty(a_tail, [(a_head, v, False)], 1.0).abs() < 1e-12
    # the fitted map aligns a planted pair too
    v_fit = stiefel_map(a_head, a_tail, jitter=0)
    assert sheaf_penalty(a_head, [(a_tail, v_fit, True)], 1.0).abs() < 1e-12


def test_scales_linearly_with_lambda() -> None:
    a_own = randn(4, 6, seed=12)
    nbrs = mixed_neighbourhood(4, 6, 13)
    base = sheaf_penalty(a_own, nbrs, 1.0)
    assert base > 0
    for lam in (1e-5, 0.01, 0.3, 2.0):
        torch.testing.assert_close(sheaf_penalty(a_own, nbrs, lam), lam * base)
    assert agent_lambda(0.64, 64) == pytest.approx(0.01)


def test_neighbours_are_constants() -> None:
    a_own = randn(3, 5, seed=14).requires_grad_()
    a_j = randn(3, 5, seed=15).requires_grad_()
    v = random_stiefel(3, 3, gen(16), dtype=F64).requires_grad_()
    sheaf_penalty(a_own, [(a_j, v, True)], 1.0).backward()
    assert a_own.grad is not None
    assert a_j.grad is None and v.grad is None


def test_no_neighbours_and_bad_shapes() -> None:
    a_own = randn(3, 5, seed=17)
    assert sheaf_penalty(a_own, [], 1.0).item() == 0.0
    v = random_stiefel(4, 3, gen(18), dtype=F64)
    with pytest.raises(ValueError):
        sheaf_penalty(a_own, [(randn(4, 5, seed=19), v, True)], 1.0)  # head must be 3×4
    with pytest.raises(ValueError):
        sheaf_penalty(a_own, [(randn(4, 6, seed=19), v, False)], 1.0)  # K mismatch


def test_transported_penalty_and_its_gradient_through_the_effective_map():
    """With ``P_ijᵀP_ij = I`` the gradient is ``(λ_i/K) Σ_j (A_i − P_ijᵀ m_j)`` (seed 000,
    Eq. 42), and the value is ``λ_i/(2K) Σ_j ‖P_ij A_i − m_j‖²``."""
    d_i, k, lam = 5, 7, 0.3
    a_own = randn(d_i, k, seed=1)
    stalks = [5, 8, 9]
    maps = [random_stiefel(s, d_i, gen(10 + n)).to(F64) for n, s in enumerate(stalks)]
    received = [randn(s, k, seed=20 + n) for n, s in enumerate(stalks)]
    a = a_own.clone().requires_grad_()
    value = transported_penalty(a, maps, received, lam)
    (grad,) = torch.autograd.grad(value, a)
    pairs = list(zip(maps, received, strict=True))
    want = sum((p @ a_own - m).pow(2).sum() for p, m in pairs) * lam / (2 * k)
    torch.testing.assert_close(value, want)
    closed = sum(a_own - p.T @ m for p, m in pairs) * (lam / k)
    torch.testing.assert_close(grad, closed)
    assert transported_penalty(a_own, [], [], lam) == 0.0
    with pytest.raises(ValueError, match="2 maps but 1 received"):
        transported_penalty(a_own, maps[:2], received[:1], lam)
