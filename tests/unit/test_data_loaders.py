"""Deterministic in-memory batching and batched augmentation."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsheaf.data.loaders import batches, epoch_order, n_batches, random_crop_flip
from fedsheaf.data.sources import black_level
from fedsheaf.models.fedrep_cnn import build_fedrep_cnn


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


def test_crop_pads_with_the_given_level_per_channel():
    xb = torch.randn(32, 3, 6, 6)
    level = black_level("cifar10")
    out = random_crop_flip(xb, 3, torch.Generator().manual_seed(2), flip=False, fill=level)
    padded = torch.stack([torch.full((12, 12), v) for v in level])
    padded = padded.expand(32, 3, 12, 12).clone()
    padded[:, :, 3:9, 3:9] = xb
    for k in range(32):  # exact windows of the image padded with black, never the mean
        windows = [padded[k, :, r : r + 6, c : c + 6] for r in range(7) for c in range(7)]
        assert any(torch.equal(out[k], w) for w in windows)
    assert any(torch.equal(out[k, :, 0, 0], torch.tensor(level)) for k in range(32))


def test_black_level_is_a_normalised_black_pixel():
    for name, (mean, std) in {"mnist": (0.1307, 0.3081), "cifar10": (0.4914, 0.2470)}.items():
        assert black_level(name)[0] == pytest.approx(-mean / std)
    assert len(black_level("cifar10")) == 3 and len(black_level("fashion-mnist")) == 1


def test_fedrep_runs_pad_their_crops_with_black():
    from fedsheaf.algorithms.federated import FEDERATED
    from fedsheaf.config.sections import load_config

    cfg = load_config("configs/fedrep_cifar10_100c2.yaml")
    task = FEDERATED[cfg.algorithm](cfg.federated).make_task(cfg)
    model = build_fedrep_cnn(3, 32, 10, seed=0)
    runner = task.make_runner(model, {}, torch.device("cpu"))
    assert runner.augment and runner.pad_fill == black_level("cifar10")
