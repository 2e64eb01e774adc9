"""Server-side math of the server-based runtime: sampling, placement, averaging, params."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.algorithms.federated.params import ParamSet
from fedsheaf.algorithms.federated.protocol import (
    average,
    balanced_placement,
    client_rank,
    dispatch_order,
    hosted_clients,
    moves_clients,
    n_selected,
    place_clients,
    rows_per_rank,
    sample_clients,
)
from fedsheaf.models.fedrep_cnn import build_fedrep_cnn

torch.set_num_threads(1)


# ---- sampling -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,r,m",
    [
        (100, 0.1, 10),
        (1000, 0.1, 100),
        (10, 0.3, 3),
        (10, 0.7, 7),
        (5, 0.01, 1),
        (100, 0.29, 29),
        (7, 1.0, 7),
    ],
)
def test_n_selected(n, r, m):
    assert n_selected(n, r) == m


def test_sampling_is_seeded_per_round():
    a = [sample_clients(100, 0.1, 7, t) for t in range(20)]
    b = [sample_clients(100, 0.1, 7, t) for t in range(20)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    for s in a:
        assert s.dtype == np.int64 and len(s) == 10
        assert np.all(np.diff(s) > 0) and s.min() >= 0 and s.max() < 100
    assert len({tuple(s) for s in a}) == 20  # rounds differ
    assert not np.array_equal(sample_clients(100, 0.1, 8, 0), a[0])  # seeds differ


def test_sampling_is_uniform_over_clients():
    rounds, n, r = 2000, 50, 0.2
    hits = np.zeros(n)
    for t in range(rounds):
        hits[sample_clients(n, r, 3, t)] += 1
    expected = rounds * r
    # Each count is Binomial(2000, 0.2): sd ~ 17.9; 5 sd is a safe bound for 50 clients.
    assert np.all(np.abs(hits - expected) < 5 * np.sqrt(rounds * r * (1 - r)))


# ---- placement ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), w=st.integers(1, 40))
def test_clients_partition_over_worker_ranks(n, w):
    hosted = [hosted_clients(rank, n, w) for rank in range(w + 1)]
    assert hosted[0] == []
    flat = sorted(c for h in hosted for c in h)
    assert flat == list(range(n))
    for rank, cs in enumerate(hosted):
        assert all(client_rank(c, w) == rank for c in cs)
        assert cs == sorted(cs)
    sizes = [len(h) for h in hosted[1:]]
    assert max(sizes) - min(sizes) <= 1
    assert rows_per_rank(range(n), w) == [len(h) for h in hosted]


def test_many_clients_per_rank_layout():
    # 100 clients on 4 worker ranks: client c lives on rank 1 + c mod 4
    assert hosted_clients(1, 100, 4)[:3] == [0, 4, 8]
    assert hosted_clients(4, 100, 4)[-1] == 99
    assert client_rank(0, 1) == 1 and client_rank(99, 1) == 1
    assert rows_per_rank([0, 1, 5, 10, 15], 4) == [0, 1, 2, 1, 1]


def test_balanced_placement_evens_out_an_unlucky_sample():
    # 10 equal clients whose homes are 4/3/2/1 on 4 workers (static: the busiest rank has 4)
    sel = [0, 4, 8, 12, 1, 5, 9, 2, 6, 3]
    assert rows_per_rank(sel, 4) == [0, 4, 3, 2, 1]
    work = np.full(20, 600.0)
    where = balanced_placement(sel, work, 4)
    assert rows_per_rank(sel, 4, where) == [0, 3, 3, 2, 2]  # ceil(10/4) = 3 at most
    # equal work: id order, each to the least-loaded rank, lowest rank on ties
    assert [where[c] for c in sorted(sel)] == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    # unequal work: the largest goes first, to rank 1; ties by client id
    uneven = balanced_placement([0, 1, 2, 3], [1.0, 5.0, 2.0, 2.0], 2)
    assert uneven == {1: 1, 2: 2, 3: 2, 0: 2}  # loads 5 | 2 + 2 + 1
    assert place_clients(sel, 4, "static") == {c: client_rank(c, 4) for c in sel}
    assert place_clients(sel, 4, "balanced", work) == where
    with pytest.raises(ValueError, match="needs every client's work"):
        place_clients(sel, 4, "balanced")
    with pytest.raises(ValueError, match="distinct"):
        balanced_placement([1, 1], work, 2)


def test_only_balanced_or_dynamic_placement_with_fewer_workers_than_clients_moves_clients():
    assert moves_clients("balanced", 4, 100) and moves_clients("dynamic", 4, 100)
    assert not moves_clients("static", 4, 100)
    assert not moves_clients("balanced", 1, 100)  # one worker: nothing to balance
    assert not moves_clients("dynamic", 100, 100)  # one client per worker
    assert moves_clients("dynamic", 4, 100, per_round=99)
    assert not moves_clients("dynamic", 4, 100, per_round=100)  # every client, every round


def test_dispatch_order_is_longest_first_ties_by_id():
    work = [3.0, 5.0, 3.0, 1.0, 5.0]
    assert dispatch_order([0, 1, 2, 3, 4], work) == [1, 4, 0, 2, 3]
    assert dispatch_order(np.array([3, 2, 0]), work) == [0, 2, 3]
    with pytest.raises(ValueError, match="decided while the round runs"):
        place_clients([0, 1], 2, "dynamic", work)


@settings(max_examples=80, deadline=None)
@given(
    work=st.lists(st.integers(1, 1000), min_size=1, max_size=60),
    w=st.integers(1, 12),
    data=st.data(),
)
def test_balanced_placement_properties(work, w, data):
    n = len(work)
    sel = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    where = balanced_placement(sel, work, w)
    assert sorted(where) == sorted(sel)  # every sampled client exactly once
    assert all(1 <= r <= w for r in where.values())
    assert balanced_placement(list(reversed(sel)), np.array(work), w) == where  # deterministic
    load = [0] * (w + 1)
    for c, r in where.items():
        load[r] += work[c]
    total, biggest = sum(work[c] for c in sel), max(work[c] for c in sel)
    assert max(load) <= total / w + biggest  # LPT: within one client of the mean
    if len(sel) <= 7 and w <= 3:  # Graham's bound against the true optimum (brute force)
        best = min(
            max(sum(work[c] for c, r in zip(sel, ranks, strict=True) if r == k) for k in range(w))
            for ranks in itertools.product(range(w), repeat=len(sel))
        )
        assert max(load) <= (4 / 3 - 1 / (3 * w)) * best + 1e-9
    counts = rows_per_rank(sel, w, where)
    assert counts[0] == 0 and sum(counts) == len(sel)
    if len(set(work)) == 1:  # equal clients: counts differ by at most one
        assert max(counts[1:]) - min(counts[1:]) <= 1


# ---- averaging ------------------------------------------------------------------------


def test_weighted_and_unweighted_average_closed_form():
    u = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, -1.0], [0.5, 0.0, 4.0]], dtype=np.float32)
    w = np.array([100.0, 300.0, 600.0])
    np.testing.assert_allclose(average(u), u.mean(axis=0), rtol=1e-6)
    expected = (100 * u[0] + 300 * u[1] + 600 * u[2]) / 1000
    np.testing.assert_allclose(average(u, w), expected, rtol=1e-6)
    assert average(u, w).dtype == np.float32


@settings(max_examples=50, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=4, max_size=4),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
def test_integer_weights_equal_repeated_rows(rows, data):
    u = np.array(rows, dtype=np.float32)
    k = data.draw(st.lists(st.integers(1, 5), min_size=len(rows), max_size=len(rows)))
    repeated = np.repeat(u, k, axis=0)
    np.testing.assert_allclose(average(u, np.array(k, float)), average(repeated), atol=1e-4)
    # same rows with equal weights: plain mean; a single row: itself
    np.testing.assert_allclose(average(u, np.ones(len(rows))), average(u), atol=1e-5)
    np.testing.assert_array_equal(average(u[:1], np.array([3.0])), u[0])


def test_average_rejects_bad_input():
    with pytest.raises(ValueError):
        average(np.zeros((0, 3)))
    with pytest.raises(ValueError):
        average(np.ones((2, 3)), np.array([0.0, 0.0]))
    with pytest.raises(ValueError):
        average(np.ones((2, 3)), np.array([1.0]))


# ---- flat parameter subsets -------------------------------------------------------------


def test_param_set_roundtrip_over_a_named_subset():
    m = build_fedrep_cnn(1, 16, 10, seed=0)
    body = ParamSet(m, reversed(m.body_names()))  # order given does not matter
    assert body.names == m.body_names()
    assert body.size == sum(p.numel() for n, p in m.named_parameters() if n in body.names)
    vec = body.flatten(m)
    assert vec.dtype == np.float32 and vec.flags.c_contiguous and vec.shape == (body.size,)
    head_before = ParamSet(m, m.head_names()).flatten(m)
    body.load(m, np.arange(body.size, dtype=np.float32))
    np.testing.assert_array_equal(body.flatten(m), np.arange(body.size, dtype=np.float32))
    assert m.conv1.weight.flatten()[0].item() == 0.0  # first body parameter first
    np.testing.assert_array_equal(ParamSet(m, m.head_names()).flatten(m), head_before)
    body.load(m, vec)
    np.testing.assert_array_equal(body.flatten(m), vec)


def test_param_set_empty_and_unknown():
    m = build_fedrep_cnn(1, 16, 10, seed=0)
    empty = ParamSet(m, [])
    assert empty.size == 0 and empty.flatten(m).shape == (0,)
    empty.load(m, np.zeros(0, np.float32))
    with pytest.raises(KeyError, match="fc9.weight"):
        ParamSet(m, ["fc9.weight"])
    with pytest.raises(ValueError):
        ParamSet(m, m.head_names()).load(m, np.zeros(3, np.float32))


def test_equal_clients_beyond_the_workers_stay_within_grahams_bound():
    # 4 equal clients on 3 workers: one worker must take two, the optimum is 6 (found by
    # hypothesis against a bound that used a lower estimate of the optimum)
    where = balanced_placement([0, 1, 2, 3], [3, 3, 3, 3], 3)
    load = [sum(3 for r in where.values() if r == k) for k in (1, 2, 3)]
    assert sorted(load) == [3, 3, 6]
