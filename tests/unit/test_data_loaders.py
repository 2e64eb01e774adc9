"""Deterministic in-memory batching and batched augmentation."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsheaf.data.loaders import batches, epoch_order, n_batches, random_crop_flip


def data(n=50):
    x = torch.arange(n * 2 * 3 * 3, dtype=torch.float32).reshape(n, 2, 3, 3)
    return x, torch.arange(n) % 7


@pytest.mark.parametrize(("bs", "drop"), [(8, False), (8, True), (5, False), (64, False)])
def test_epoch_covers_indices_once(bs, drop):
    x, y = data()
    idx = np.arange(3, 45)
    out = list(batches(x, y, idx, bs, seed=1, epoch=0, drop_last=drop))
    assert len(out) == n_batches(idx, bs, drop) == n_batches(len(idx), bs, drop)
    seen = torch.cat([(xb[:, 0, 0, 0] // 18).long() for xb, _ in out]).numpy()
    if drop:
        assert len(seen) == (len(idx) // bs) * bs and len(set(seen)) == len(seen)
        assert set(seen) <= set(idx.tolist())
    else:
        assert np.array_equal(np.sort(seen), idx)
    for xb, yb in out:
        rows = (xb[:, 0, 0, 0] // 18).long()
        assert torch.equal(xb, x[rows]) and torch.equal(yb, y[rows])
        assert xb.shape[0] == bs or (not drop and xb is out[-1][0])


def test_order_is_a_function_of_seed_and_epoch():
    idx = np.arange(100)
    a = epoch_order(idx, seed=3, epoch=2)
    assert np.array_equal(a, epoch_order(torch.arange(100), seed=3, epoch=2))
    assert not np.array_equal(a, epoch_order(idx, seed=3, epoch=3))
    assert not np.array_equal(a, epoch_order(idx, seed=4, epoch=2))
    assert np.array_equal(epoch_order(idx[::-1], 3, 2, shuffle=False), idx[::-1])
    x, y = data(100)
    first = [yb for _, yb in batches(x, y, idx, 10, seed=3, epoch=2)]
    again = [yb for _, yb in batches(x, y, idx, 10, seed=3, epoch=2)]
    assert all(torch.equal(p, q) for p, q in zip(first, again, strict=True))
    ordered = torch.cat([yb for _, yb in batches(x, y, idx, 10, 0, 0, shuffle=False)])
    assert torch.equal(ordered, y)


def test_crop_flip_brute_force():
    gen = torch.Generator().manual_seed(0)
    xb = torch.randn(16, 3, 8, 8)
    assert torch.equal(random_crop_flip(xb, 0, gen, flip=False), xb)
    out = random_crop_flip(xb, 2, torch.Generator().manual_seed(7))
    assert out.shape == xb.shape
    padded = F.pad(xb, (2, 2, 2, 2))
    for k in range(16):  # every output is one window of the padded image, maybe mirrored
        windows = [padded[k, :, r : r + 8, c : c + 8] for r in range(5) for c in range(5)]
        windows += [w.flip(-1) for w in windows]
        assert any(torch.equal(out[k], w) for w in windows)
    again = random_crop_flip(xb, 2, torch.Generator().manual_seed(7))
    assert torch.equal(out, again)
    flipped = random_crop_flip(xb, 0, torch.Generator().manual_seed(1))
    n_flip = sum(torch.equal(f, x.flip(-1)) for f, x in zip(flipped, xb, strict=True))
    assert 0 < n_flip < 16
