"""The maths of the heterogeneous baselines: ComFed prototypes and transport, Sheaf-FMTL."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.algorithms.comfed import class_prototypes, prototype_penalty, transport_matrix
from fedsheaf.algorithms.sheaf_fmtl import fmtl_map_bytes, fmtl_map_entries, fmtl_step, stalk_dim
from fedsheaf.config.presets import TABLE2, mnist15_graph
from fedsheaf.models.encoders import build_agent_model

torch.set_num_threads(1)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- ComFed


def test_class_prototypes_are_class_means_with_counts():
    g = _gen(0)
    z = torch.randn(20, 3, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 2, 2, 0, 3] * 4)
    protos = class_prototypes(z, y, n_classes=5)
    assert protos.shape == (5, 4)
    for c in range(5):
        members = z[y == c]
        assert protos[c, -1].item() == len(members)
        expect = members.mean(0) if len(members) else torch.zeros(3, dtype=torch.float64)
        torch.testing.assert_close(protos[c, :-1], expect)


def test_prototype_penalty_uses_only_classes_both_ends_have():
    own = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [3.0, 4.0, 1.0]], requires_grad=True)
    other = torch.tensor([[0.0, 0.0, 5.0], [9.0, 9.0, 3.0], [0.0, 0.0, 0.0]])
    # class 0 shared (counts 2 and 5); class 1 absent here; class 2 absent there
    pen = prototype_penalty(own, [other], lam_i=0.5)
    assert pen.item() == pytest.approx(0.5 / 2 * (1.0**2 + 0.0**2) / 1)
    pen.backward()
    assert own.grad[1].abs().sum() == 0 and own.grad[2].abs().sum() == 0
    assert own.grad[0, -1] == 0  # counts are not pulled


def test_transport_through_the_shared_space_recovers_consensus_latents():
    """If P_i z_i = P_j z_j in the shared space and P_i has full column rank, P_i⁺P_j z_j = z_i."""
    g = _gen(1)
    d_i, d_j, r = 5, 7, 9
    p_i = torch.randn(r, d_i, generator=g, dtype=torch.float64)  # full column rank
    m = torch.randn(d_i, d_j, generator=g, dtype=torch.float64)
    p_j = p_i @ m  # range(P_j) ⊂ range(P_i): every z_j has a consensus partner z_i = M z_j
    z_j = torch.randn(d_j, 11, generator=g, dtype=torch.float64)
    z_i = m @ z_j
    torch.testing.assert_close(p_i @ z_i, p_j @ z_j, atol=1e-10, rtol=0)  # the premise
    t = transport_matrix(p_i, p_j)
    assert t.shape == (d_i, d_j)
    torch.testing.assert_close(t @ z_j, z_i, atol=1e-8, rtol=1e-8)


# ---------------------------------------------------------------- Sheaf-FMTL


@given(
    n_i=st.integers(1, 10**7),
    n_j=st.integers(1, 10**7),
    gamma=st.floats(1e-7, 1.0, allow_nan=False),
)
@settings(max_examples=200, deadline=None)
def test_stalk_dim_matches_the_paper_formula(n_i, n_j, gamma):
    d = stalk_dim(n_i, n_j, gamma)
    assert d == max(1, int(np.floor(gamma * min(n_i, n_j))))
    assert d >= 1 and (d == 1 or d <= gamma * min(n_i, n_j))


def test_map_memory_counts_both_maps_of_every_edge():
    counts = [1000, 3000, 2000]
    edges = [(0, 1), (1, 2), (0, 2)]
    gamma = 0.01
    brute = 0
    for i, j in edges:
        d = max(1, int(gamma * min(counts[i], counts[j])))
        brute += torch.empty(d, counts[i]).numel() + torch.empty(d, counts[j]).numel()
    assert fmtl_map_entries(counts, edges, gamma) == brute == 10 * 4000 + 20 * 5000 + 10 * 3000
    assert fmtl_map_bytes(counts, edges, gamma) == 4 * brute
    assert fmtl_map_bytes(counts, edges, gamma, bytes_per_entry=2) == 2 * brute


def test_map_memory_grows_linearly_with_gamma_above_the_floor():
    counts, edges = [10**6, 2 * 10**6], [(0, 1)]
    small = fmtl_map_entries(counts, edges, 1e-9)  # floor: d_ij = 1
    assert small == 3 * 10**6
    m3, m2 = fmtl_map_entries(counts, edges, 1e-3), fmtl_map_entries(counts, edges, 1e-2)
    assert m2 == 10 * m3 == 10 * 1000 * 3 * 10**6


def test_table2_memory_at_the_papers_gamma_needs_gigabytes():
    """γ = 1e-3 on the 15 Table-2 models and the class-overlap graph (paper Fig. 4)."""
    counts = [
        sum(
            p.numel()
            for p in build_agent_model(1, a.encoder, a.head, a.dropout, 10, seed=0).parameters()
        )
        for a in TABLE2
    ]
    assert 3.0e6 < sum(counts) < 3.6e6  # "Total: 3.41M parameters"
    edges = mnist15_graph().edges
    gib = fmtl_map_bytes(counts, edges, 1e-3, bytes_per_entry=2) / 2**30
    assert 5 < gib < 100, gib
    # one order of magnitude of γ is one order of magnitude of memory
    ratio = fmtl_map_entries(counts, edges, 1e-2) / fmtl_map_entries(counts, edges, 1e-3)
    assert 9.5 < ratio < 10.5


def test_fmtl_step_is_a_gradient_step_on_the_edge_disagreement():
    g = _gen(3)
    n, lam, alpha, eta = 6, 0.7, 0.1, 0.05
    theta = torch.randn(n, generator=g, dtype=torch.float64)
    maps = {j: torch.randn(d, n, generator=g, dtype=torch.float64) for j, d in [(1, 2), (4, 3)]}
    recv = {j: torch.randn(p.shape[0], generator=g, dtype=torch.float64) for j, p in maps.items()}
    new_theta, new_maps = fmtl_step(theta, maps, recv, lam, alpha, eta)

    th = theta.clone().requires_grad_(True)
    loss = sum(0.5 * lam * (maps[j] @ th - recv[j]).pow(2).sum() for j in maps)
    (grad,) = torch.autograd.grad(loss, th)
    torch.testing.assert_close(new_theta, theta - alpha * grad)
    for j, p in maps.items():
        # then each map: a gradient step on the same disagreement at the *updated* θ, as
        # the authors' update_restriction_maps recomputes it after the θ step
        pj = p.clone().requires_grad_(True)
        (gp,) = torch.autograd.grad(0.5 * lam * (pj @ new_theta - recv[j]).pow(2).sum(), pj)
        torch.testing.assert_close(new_maps[j], p - eta * gp)
        stale = p - eta * lam * torch.outer(p @ theta - recv[j], new_theta)  # θ mixed
        assert not torch.allclose(new_maps[j], stale)


def test_repeated_fmtl_rounds_reduce_disagreement_between_two_agents():
    g = _gen(4)
    n_i, n_j, d = 8, 5, 3
    th_i = torch.randn(n_i, generator=g, dtype=torch.float64)
    th_j = torch.randn(n_j, generator=g, dtype=torch.float64)
    p_ij = {1: torch.randn(d, n_i, generator=g, dtype=torch.float64) * 0.3}
    p_ji = {0: torch.randn(d, n_j, generator=g, dtype=torch.float64) * 0.3}
    gaps = []
    for _ in itertools.repeat(None, 200):
        m_i, m_j = p_ij[1] @ th_i, p_ji[0] @ th_j
        gaps.append((m_i - m_j).norm().item())
        th_i, p_ij = fmtl_step(th_i, p_ij, {1: m_j}, 1.0, 0.05, 0.05)
        th_j, p_ji = fmtl_step(th_j, p_ji, {0: m_i}, 1.0, 0.05, 0.05)
    assert gaps[-1] < 0.05 * gaps[0]
