"""Sheaf-FRL variants and pilot strategies, one process: the maths behind the MPI runs.

The homogeneous and strict variants send transported pilots ``P_ij A_i`` and refit
``P_ij = argmin ‖P A_i − m_{j→i}‖``. Checked here with the real map functions: the
effective map ``P_ijᵀ P_ji`` each end trains with equals the standard Stiefel map, and
the transported penalty has the standard penalty's value and gradient (seed 000, Eq. 42).
That the variants' own steps are the standard step (strict, homogeneous tails) is checked
on real ranks, parameter by parameter, in ``tests/mpi/test_variants.py``.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedsheaf.algorithms.sheaf_frl_pilots import PilotPlan
from fedsheaf.algorithms.sheaf_frl_variants import HomogeneousSheafFRL, StrictSheafFRL
from fedsheaf.config.sections import SheafConfig
from fedsheaf.sheaf.maps import PilotWindow, random_stiefel, stiefel_map
from fedsheaf.sheaf.penalty import sheaf_penalty
from fedsheaf.sheaf.prototypes import (
    PrototypeStream,
    class_groups,
    group_means,
    kmeans_groups,
    pooled_inputs,
)
from fedsheaf.util.seeding import torch_generator

torch.set_num_threads(1)
F64 = torch.float64


def _pilots(d_head=6, d_tail=4, k=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    a_tail = torch.randn(d_tail, k, generator=g, dtype=F64)
    true = random_stiefel(d_head, d_tail, g, dtype=F64)
    a_head = true @ a_tail + 0.1 * torch.randn(d_head, k, generator=g, dtype=F64)
    return a_head, a_tail, g


@pytest.mark.parametrize("dims", [(6, 4), (5, 5)])
def test_strict_refits_give_each_end_the_standard_map(dims):
    a_h, a_t, g = _pilots(*dims)
    standard = stiefel_map(a_h, a_t)
    o_old = random_stiefel(dims[0], dims[0], g, dtype=F64)  # head's mask, O(d_head)
    v_old = random_stiefel(dims[0], dims[1], g, dtype=F64)  # tail's mask, St(d_head, d_tail)
    # messages sent with the old masks; each end refits against what it received
    o_new = stiefel_map(v_old @ a_t, a_h)  # head: argmin_O ‖O A_h − V A_t‖ (full SVD)
    v_new = stiefel_map(o_old @ a_h, a_t)  # tail: argmin_V ‖O A_h − V A_t‖ (thin SVD)
    torch.testing.assert_close(o_new.T @ v_old, standard, atol=1e-5, rtol=0)
    torch.testing.assert_close(o_old.T @ v_new, standard, atol=1e-5, rtol=0)
    # ... but the two *new* maps do not match each other (why evaluation resynchronises)
    assert (o_new.T @ v_new - standard).abs().max() > 1e-2


def test_transported_penalty_equals_the_standard_penalty_and_gradient():
    a_h, a_t, g = _pilots()
    lam, k = 0.3, a_h.shape[1]
    standard = stiefel_map(a_h, a_t)
    v_tail = random_stiefel(6, 4, g, dtype=F64)
    o_head = stiefel_map(v_tail @ a_t, a_h)  # head refit against the tail's message

    # head side: own A_h, message m = V A_t
    ah = a_h.clone().requires_grad_(True)
    ref = sheaf_penalty(ah, [(a_t, standard, True)], lam)
    (g_ref,) = torch.autograd.grad(ref, ah)
    ah2 = a_h.clone().requires_grad_(True)
    transported = (o_head @ ah2 - v_tail @ a_t).pow(2).sum() * lam / (2 * k)
    (g_tr,) = torch.autograd.grad(transported, ah2)
    torch.testing.assert_close(transported, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(g_tr, g_ref, atol=1e-6, rtol=1e-6)

    # tail side: own A_t, message m = O A_h, own map refitted against it
    o_mask = random_stiefel(6, 6, g, dtype=F64)
    v_fit = stiefel_map(o_mask @ a_h, a_t)
    at = a_t.clone().requires_grad_(True)
    ref_t = sheaf_penalty(at, [(a_h, standard, False)], lam)
    (g_ref_t,) = torch.autograd.grad(ref_t, at)
    at2 = a_t.clone().requires_grad_(True)
    tr_t = (v_fit @ at2 - o_mask @ a_h).pow(2).sum() * lam / (2 * k)
    (g_tr_t,) = torch.autograd.grad(tr_t, at2)
    torch.testing.assert_close(tr_t, ref_t, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(g_tr_t, g_ref_t, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("map_refresh", ["epoch", "step"])
def test_the_strict_schedule_alternates_ends_with_a_window_and_refits_both_per_step(
    map_refresh,
):
    """``StrictSheafFRL.side_refits`` (a decision on the config alone)."""
    me = SimpleNamespace(cfg=SimpleNamespace(sheaf=SimpleNamespace(map_refresh=map_refresh)))
    schedule = [
        (StrictSheafFRL.side_refits(me, True, r), StrictSheafFRL.side_refits(me, False, r))
        for r in range(4)
    ]
    if map_refresh == "step":
        assert schedule == [(True, True)] * 4
    else:  # heads at refreshes 0, 2, ..., tails at 1, 3, ...
        assert schedule == [(True, False), (False, True)] * 2
    assert [HomogeneousSheafFRL.side_refits(me, h, 0) for h in (True, False)] == [False, True]


def test_alternating_window_refits_keep_both_ends_on_one_map():
    """Window mode: one end refits per refresh (the schedule above), so after every refresh
    the two ends' maps compose to the standard map."""
    a_h, a_t, g = _pilots(7, 3)
    o = random_stiefel(7, 7, g, dtype=F64)
    v = random_stiefel(7, 3, g, dtype=F64)
    me = SimpleNamespace(cfg=SimpleNamespace(sheaf=SimpleNamespace(map_refresh="epoch")))
    for refresh in range(4):
        if StrictSheafFRL.side_refits(me, True, refresh):
            o = stiefel_map(v @ a_t, a_h)
        if StrictSheafFRL.side_refits(me, False, refresh):
            v = stiefel_map(o @ a_h, a_t)
        torch.testing.assert_close(o.T @ v, stiefel_map(a_h, a_t), atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", [HomogeneousSheafFRL, StrictSheafFRL])
def test_only_the_end_that_refits_next_collects_a_window(variant):
    """Window mode: the cross-products of an epoch serve the end that refits at its close
    (homogeneous: always the tail; strict: tails after epoch 1, heads after epoch 2, ...);
    the other end keeps none. A message sent just before its sender refitted is left out."""
    a_h, a_t, _ = _pilots(5, 5, k=8)
    sheaf = SimpleNamespace(map_refresh="epoch")
    kept: dict[bool, list[int]] = {}
    for head in (True, False):
        me = object.__new__(variant)
        me.cfg = SimpleNamespace(sheaf=sheaf)
        me.nbr = SimpleNamespace(neighbours=[1])
        me.is_head, me.out_maps, me.refreshes = {1: head}, {1: torch.eye(5)}, 0
        me.window, me.lam_i, me.agent = PilotWindow(), 0.1, SimpleNamespace(device="cpu")
        own, other = (a_h.float(), a_t.float()) if head else (a_t.float(), a_h.float())
        kept[head] = []
        for epoch in range(3):
            for _ in range(4):  # steps
                me.penalty(own.clone(), [other.clone()])
            kept[head].append(me.window.samples(1))
            me.end_epoch(epoch)
    if variant is HomogeneousSheafFRL:
        assert kept == {True: [0, 0, 0], False: [4 * 8, 4 * 8, 4 * 8]}  # heads never refit
    else:  # strict: the head refitted at the first step, so the tail skips that message
        assert kept == {True: [0, 4 * 8, 0], False: [3 * 8, 0, 4 * 8]}


# ---------------------------------------------------------------- prototypes


def _blobs(n_per=30, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.concatenate([c + rng.normal(size=(n_per, 2)) for c in centres])
    return x, np.repeat(np.arange(3), n_per)


def test_kmeans_recovers_separated_blobs_and_is_deterministic():
    x, truth = _blobs()
    groups = kmeans_groups(x, 3, seed=5)
    assert sorted(len(g) for g in groups) == [30, 30, 30]
    for g in groups:
        assert len(set(truth[g])) == 1
    again = kmeans_groups(x.copy(), 3, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(groups, again, strict=True))


def test_kmeans_keeps_every_group_non_empty():
    x = np.zeros((10, 2))  # all points identical
    groups = kmeans_groups(x, 4, seed=0)
    assert len(groups) == 4 and all(len(g) > 0 for g in groups)
    assert sorted(np.concatenate(groups).tolist()) == list(range(10))


def test_prototype_stream_and_group_means():
    labels = np.array([2, 0, 0, 1, 2, 2, 1, 0, 2])
    groups = class_groups(labels)
    assert [labels[g].tolist() for g in groups] == [[0, 0, 0], [1, 1], [2, 2, 2, 2]]
    stream = PrototypeStream(groups, members=3, seed=7)
    idx = stream.indices(epoch=1, step=4)
    assert idx.shape == (9,)
    assert [set(labels[idx[3 * g : 3 * g + 3]].tolist()) for g in range(3)] == [{0}, {1}, {2}]
    assert np.array_equal(idx, PrototypeStream(groups, 3, 7).indices(1, 4))
    feats = torch.arange(18.0).reshape(9, 2)
    torch.testing.assert_close(group_means(feats, 3), feats.reshape(3, 3, 2).mean(1))


def test_pooled_inputs_shape():
    x = torch.rand(5, 1, 28, 28)
    assert pooled_inputs(x).shape == (5, 49)
    assert pooled_inputs(torch.rand(3, 1, 8, 8)).shape == (3, 49)


# ---------------------------------------------------------------- pilot plans


def _encode(x: torch.Tensor) -> torch.Tensor:
    g = torch_generator(0, "test-encoder")
    w = torch.randn(x[0].numel(), 6, generator=g)
    return x.flatten(1) @ w


@pytest.mark.parametrize(
    "strategy,parseval,columns",
    [
        ("uniform", False, 16),
        ("stratified", False, 16),
        ("prototype", False, 4),
        ("kmeans", True, 16),
    ],
)
def test_pilot_plans_build_the_pilot_matrix(strategy, parseval, columns):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(80, 1, 8, 8, generator=g)
    y = torch.arange(80) % 4
    sc = SheafConfig(
        pilot_batch=16, pilot_strategy=strategy, parseval=parseval, prototype_members=3
    )
    plan = PilotPlan(sc, seed=3, x_pilot=x, y_pilot=y)
    assert plan.columns == columns
    a = plan.features(_encode, x, epoch=0, step=2)
    assert a.shape == (6, columns)
    if parseval:  # rows orthonormal: A Aᵀ = I (K > d)
        torch.testing.assert_close(a @ a.T, torch.eye(6), atol=1e-4, rtol=0)
    # every rank builds the same plan from the seed
    other = PilotPlan(sc, seed=3, x_pilot=x.clone(), y_pilot=y.clone())
    assert np.array_equal(plan.indices(2, 5), other.indices(2, 5))
    if strategy == "stratified":
        assert np.bincount(y[plan.indices(0, 0)].numpy(), minlength=4).tolist() == [4] * 4
