"""The maths of the centralized baselines: FedProto's EMA prototypes, FedMuscle's InfoNCE."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsheaf.algorithms.fedmuscle import contrastive_alignment, is_alignment_epoch
from fedsheaf.algorithms.fedproto import ema_prototypes, prototype_pull

torch.set_num_threads(1)


def test_ema_prototypes_first_sight_momentum_and_unseen_classes():
    protos = np.array([[1.0, 1.0], [0.0, 0.0], [5.0, 5.0]])
    valid = np.array([True, False, True])
    sums = np.array([[6.0, 0.0], [4.0, 2.0], [0.0, 0.0]])
    counts = np.array([2.0, 2.0, 0.0])
    out, ok = ema_prototypes(protos, valid, sums, counts, momentum=0.9)
    np.testing.assert_allclose(out[0], 0.9 * np.array([1.0, 1.0]) + 0.1 * np.array([3.0, 0.0]))
    np.testing.assert_allclose(out[1], [2.0, 1.0])  # first seen: the mean itself
    np.testing.assert_allclose(out[2], [5.0, 5.0])  # nobody saw class 2: unchanged
    assert ok.tolist() == [True, True, True]
    assert protos[0].tolist() == [1.0, 1.0]  # inputs untouched


def test_ema_converges_to_a_constant_class_mean():
    protos, valid = np.zeros((1, 3)), np.array([False])
    target = np.array([[1.0, -2.0, 0.5]])
    for _ in range(60):
        protos, valid = ema_prototypes(protos, valid, 4 * target, np.array([4.0]), 0.9)
    np.testing.assert_allclose(protos, target)
    protos, valid = np.full((1, 3), 10.0), np.array([True])
    for k in range(1, 4):
        protos, valid = ema_prototypes(protos, valid, target, np.array([1.0]), 0.9)
        np.testing.assert_allclose(protos, target + (10.0 - target) * 0.9**k)


def test_prototype_pull_only_for_classes_with_prototypes():
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]], requires_grad=True)
    y = torch.tensor([0, 1, 2])
    protos = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    valid = torch.tensor([True, True, False])
    pen = prototype_pull(z, y, protos, valid, lam_i=0.5)
    assert pen.item() == pytest.approx(0.25 * (1.0 + 4.0) / 2)
    pen.backward()
    assert z.grad[2].abs().sum() == 0
    assert prototype_pull(z, y, protos, torch.zeros(3, dtype=torch.bool), 0.5).item() == 0


def test_contrastive_alignment_matches_the_infonce_formula():
    g = torch.Generator().manual_seed(0)
    z, t = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    tau = 0.1
    loss = contrastive_alignment(z, t, tau)
    zn, tn = F.normalize(z, dim=1), F.normalize(t, dim=1)
    brute = 0.0
    for k in range(5):
        sims = [float(zn[k] @ tn[m]) / tau for m in range(5)]
        brute -= sims[k] - math.log(sum(math.exp(s) for s in sims))
    assert loss.item() == pytest.approx(brute / 5, rel=1e-5)
    # aligned (and mutually distinct) representations have a lower loss
    assert contrastive_alignment(t, t, tau) < loss
    assert contrastive_alignment(3 * t, t, tau) == pytest.approx(contrastive_alignment(t, t, tau))


def test_contrastive_target_is_a_constant():
    z = torch.randn(4, 3, requires_grad=True)
    t = torch.randn(4, 3, requires_grad=True)
    contrastive_alignment(z, t, 0.1).backward()
    assert z.grad is not None and t.grad is None


def test_alignment_schedule_is_four_task_epochs_then_one():
    flags = [is_alignment_epoch(e, 4, 1) for e in range(10)]
    assert flags == [False] * 4 + [True] + [False] * 4 + [True]
    assert [is_alignment_epoch(e, 0, 1) for e in range(3)] == [True] * 3
