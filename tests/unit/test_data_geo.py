"""Geo regression view, projection partition and the tabular regression set."""

import math

import numpy as np
import pytest
import torch

from fedsheaf.data.datasets_registry import load_dataset
from fedsheaf.data.geo import geo_view, projection_partition, tabular_regression
from fedsheaf.util.errors import ConfigError, DataError


def blob(side=32, sigma=3.0):
    c = torch.arange(side, dtype=torch.float32) - (side - 1) / 2
    g = torch.exp(-(c[:, None] ** 2 + c[None, :] ** 2) / (2 * sigma**2))
    return g[None, None]


def moments(img):
    """Centroid in normalised canvas coordinates (x, y) and pixel spread along x."""
    h, w = img.shape
    u = (2 * torch.arange(w) + 1) / w - 1
    v = (2 * torch.arange(h) + 1) / h - 1
    m = img.sum()
    cx, cy = (img.sum(0) * u).sum() / m, (img.sum(1) * v).sum() / m
    px = torch.arange(w, dtype=torch.float32)
    mx = (img.sum(0) * px).sum() / m
    spread = torch.sqrt((img.sum(0) * (px - mx) ** 2).sum() / m)
    return cx.item(), cy.item(), spread.item()


def test_geo_targets_describe_the_transform():
    images = blob().repeat(12, 1, 1, 1)
    view = geo_view(images, seed=3, max_shift=0.25, scale_range=(0.8, 1.25), out_size=48)
    assert view.x.shape == (12, 1, 48, 48) and view.y.shape == (12, 3)
    assert view.target_names == ("x_shift", "y_shift", "log_scale")
    for img, (dx, dy, log_s) in zip(view.x[:, 0], view.y.tolist(), strict=True):
        cx, cy, spread = moments(img)
        assert abs(cx - dx) < 0.01 and abs(cy - dy) < 0.01
        assert abs(spread / (3.0 * math.exp(log_s)) - 1) < 0.03  # pixel size kept at scale 1
    assert torch.all(view.y[:, :2].abs() <= 0.25)
    assert torch.all((view.y[:, 2] >= math.log(0.8)) & (view.y[:, 2] <= math.log(1.25)))


def test_geo_identity_and_determinism():
    ds = load_dataset("digits", ".")
    x = ds.x[:64]
    same = geo_view(x, seed=0, max_shift=0.0, scale_range=(1.0, 1.0))
    assert torch.allclose(same.x, x, atol=1e-5)
    assert torch.count_nonzero(same.y) == 0
    a = geo_view(x, seed=1, chunk=10)
    b = geo_view(x, seed=1)
    assert torch.allclose(a.x, b.x, atol=1e-6) and torch.equal(a.y, b.y)
    assert not torch.equal(a.y, geo_view(x, seed=2).y)
    with pytest.raises(ConfigError, match="scale_range"):
        geo_view(x, seed=0, scale_range=(0.0, 1.0))
    with pytest.raises(DataError, match="N, C, H, W"):
        geo_view(x[:, 0], seed=0)


def test_projection_partition():
    rng = np.random.default_rng(0)
    angle = np.deg2rad(30)
    axis = np.array([np.cos(angle), np.sin(angle)])
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    t = rng.normal(size=(4003, 2)) * [3.0, 1.0] @ rot.T + [1.0, -2.0]
    test = rng.normal(size=(997, 2)) * [3.0, 1.0] @ rot.T + [1.0, -2.0]
    part = projection_partition(t, 4, test_targets=test)
    assert abs(part.direction @ axis) > 0.995 and part.direction[np.argmax(abs(part.direction))] > 0
    sizes = [g.size for g in part.train]
    assert max(sizes) - min(sizes) <= 1
    assert np.array_equal(np.sort(np.concatenate(part.train)), np.arange(4003))
    proj = (t - t.mean(0)) @ part.direction
    for lo, hi in zip(part.train, part.train[1:], strict=False):
        assert proj[lo].max() <= proj[hi].min()
    assert np.array_equal(np.sort(np.concatenate(part.test)), np.arange(997))
    tproj = (test - t.mean(0)) @ part.direction
    edges = np.concatenate([[-np.inf], part.cuts, [np.inf]])
    for m, g in enumerate(part.test):
        assert np.all((tproj[g] >= edges[m]) & (tproj[g] < edges[m + 1]))
    means = np.array([t[g].mean(0) @ axis for g in part.train])
    assert np.all(np.diff(means) > 1.0)  # clients differ in target mean along the axis
    again = projection_partition(torch.from_numpy(t), 4)
    assert again.test is None
    assert all(np.array_equal(p, q) for p, q in zip(part.train, again.train, strict=True))


def test_tabular_regression():
    from sklearn.datasets import load_diabetes

    data = tabular_regression()
    assert data.x.shape == (442, 8) and data.y.shape == (442, 3)
    assert data.x.dtype == torch.float32 and data.target_names == ("progression", "bmi", "bp")
    assert torch.allclose(data.y.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(data.y.std(0, unbiased=False), torch.ones(3), atol=1e-4)
    raw = load_diabetes(scaled=False).target
    assert np.allclose(data.y[:, 0].numpy(), (raw - raw.mean()) / raw.std(), atol=1e-5)
    cov = np.cov(data.y.numpy(), rowvar=False)
    assert np.linalg.eigvalsh(cov).min() > 0.1  # a genuinely 3-D target distribution
    with pytest.raises(DataError, match="diabetes3"):
        tabular_regression("boston")
