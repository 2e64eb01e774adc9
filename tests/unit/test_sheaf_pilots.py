import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.sheaf.pilots import PilotStream, parseval
from fedsheaf.util.errors import ConfigError


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    pool=st.integers(1, 300),
    frac=st.floats(0.01, 1.0),
    epoch=st.integers(0, 50),
    step=st.integers(0, 500),
)
def test_same_seed_same_batches(seed: int, pool: int, frac: float, epoch: int, step: int) -> None:
    k = max(1, int(frac * pool))
    a = PilotStream(seed, pool, k)
    b = PilotStream(seed, pool, k)
    b.indices(epoch + 1, 0)  # call order must not matter
    ia = a.indices(epoch, step)
    assert np.array_equal(ia, b.indices(epoch, step))
    assert ia.dtype == np.int64 and ia.shape == (k,)
    assert len(np.unique(ia)) == k
    assert ia.min() >= 0 and ia.max() < pool


def test_different_seeds_and_epochs_differ() -> None:
    a, b = PilotStream(1, 1000, 64), PilotStream(2, 1000, 64)
    assert not np.array_equal(a.indices(0, 0), b.indices(0, 0))
    assert not np.array_equal(a.indices(0, 0), a.indices(1, 0))


def test_uniform_epoch_covers_pool() -> None:
    s = PilotStream(5, 100, 10)
    seen = np.concatenate([s.indices(3, t) for t in range(10)])
    assert np.array_equal(np.sort(seen), np.arange(100))
    # cycling: step 10 restarts the epoch's permutation
    assert np.array_equal(s.indices(3, 10), s.indices(3, 0))


def test_stratified_balances_classes() -> None:
    labels = np.repeat(np.arange(4), [30, 40, 25, 50])
    rng = np.random.default_rng(0)
    labels = labels[rng.permutation(len(labels))]
    s = PilotStream(7, len(labels), 10, strategy="stratified", labels=labels)
    totals = np.zeros(4, dtype=int)
    for step in range(8):
        idx = s.indices(2, step)
        assert len(idx) == 10 and len(np.unique(idx)) == 10
        counts = np.bincount(labels[idx], minlength=4)
        assert counts.min() >= 2 and counts.max() <= 3
        totals += counts
    assert totals.max() - totals.min() <= 1  # extra slots rotate
    again = PilotStream(7, len(labels), 10, strategy="stratified", labels=labels)
    assert np.array_equal(again.indices(2, 5), s.indices(2, 5))


def test_stratified_covers_each_class_before_repeating() -> None:
    labels = np.repeat(np.arange(3), 12)
    s = PilotStream(3, 36, 6, strategy="stratified", labels=labels)
    seen = np.concatenate([s.indices(0, t) for t in range(6)])
    assert np.array_equal(np.sort(seen), np.arange(36))


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="pilot batch"):
        PilotStream(0, 10, 11)
    with pytest.raises(ConfigError, match="labels"):
        PilotStream(0, 10, 4, strategy="stratified")
    with pytest.raises(ConfigError, match="strategy"):
        PilotStream(0, 10, 4, strategy="kmeans")
    with pytest.raises(ConfigError, match="per class"):
        PilotStream(0, 6, 6, strategy="stratified", labels=np.array([0, 0, 0, 0, 0, 1]))


def test_parseval() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 5, generator=g, dtype=torch.float64)
    p = parseval(a)
    torch.testing.assert_close(p.T @ p, torch.eye(5, dtype=torch.float64))
    # same as A (AᵀA)^{-1/2} when AᵀA is invertible
    lam, q = torch.linalg.eigh(a.T @ a)
    torch.testing.assert_close(p, a @ (q * lam.rsqrt()) @ q.T)
    # K > d: rank-deficient Gram, guarded, ÃᵀÃ is a projector
    wide = torch.randn(3, 7, generator=g, dtype=torch.float64)
    pw = parseval(wide)
    proj = pw.T @ pw
    assert torch.isfinite(pw).all()
    torch.testing.assert_close(proj @ proj, proj)
    assert torch.linalg.matrix_rank(proj) == 3
    assert torch.equal(parseval(torch.zeros(4, 3)), torch.zeros(4, 3))
