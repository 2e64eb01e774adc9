"""Regression views for head-only FedAvg (SPEC sections 4 and 6, seed 002).

* :func:`geo_view` -- the "geo" view of an image set (CIFAR-geo in seed 002): each
  image is randomly shifted and zoomed; targets are (x-shift, y-shift, log-scale).
* :func:`projection_partition` -- clients with different target means and
  covariances: targets projected on the leading eigenvector of their covariance,
  sorted, cut into equal groups.
* :func:`tabular_regression` -- a small three-target regression set built from
  scikit-learn's bundled diabetes data, for the quick path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedsheaf.util.errors import ConfigError, DataError

__all__ = [
    "GeoPartition",
    "RegressionData",
    "geo_view",
    "projection_partition",
    "tabular_regression",
]


@dataclass
class RegressionData:
    """Inputs and multivariate targets of a regression set."""

    name: str
    x: torch.Tensor  # float32 (N, ...) inputs
    y: torch.Tensor  # float32 (N, C) targets
    target_names: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The inputs' shape ``(N, ...)``."""
        return tuple(self.x.shape)

    def take(self, rows: Any) -> torch.Tensor:
        """Inputs ``rows`` (as :meth:`fedsheaf.data.sources.Dataset.take` gives images)."""
        return self.x[rows]


def geo_view(
    images: torch.Tensor,
    seed: int,
    max_shift: float = 0.25,
    scale_range: tuple[float, float] = (0.8, 1.25),
    out_size: int | None = None,
    chunk: int = 4096,
) -> RegressionData:
    """Randomly shift and zoom every image; targets are the applied transform.

    Sample ``n`` gets ``dx, dy ~ U(-max_shift, max_shift)`` and
    ``log(scale) ~ U(log a, log b)`` for ``scale_range = (a, b)``, from
    ``torch.Generator().manual_seed(seed)``. The output canvas has side
    ``out_size`` (default: the input side); at scale 1 the image keeps its pixel
    size, centred. A canvas point ``u`` (normalised coordinates in [-1, 1]) shows
    the input at ``(u - (dx, dy)) * (out_size / H) / scale``, so the content moves
    right/down by ``dx``/``dy`` (fractions of the canvas half-width) and grows by
    ``scale``. Outside the image the canvas is 0 (the data mean after
    normalisation). Targets ``(dx, dy, log scale)`` are float32, ``(N, 3)``.
    """
    if images.ndim != 4:
        raise DataError(f"geo_view needs images of shape (N, C, H, W), got {tuple(images.shape)}")
    n, c, h, w = images.shape
    lo, hi = scale_range
    if not (0 < lo <= hi) or not (0 <= max_shift):
        raise ConfigError(
            f"geo view needs 0 < scale_range[0] <= scale_range[1] and max_shift >= 0, "
            f"got scale_range={scale_range}, max_shift={max_shift}"
        )
    side_h = out_size or h
    side_w = out_size or w
    gen = torch.Generator().manual_seed(int(seed))
    u = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    shift = (2.0 * u[:, :2] - 1.0) * max_shift
    log_s = math.log(lo) + u[:, 2] * (math.log(hi) - math.log(lo))
    targets = torch.cat([shift, log_s[:, None]], dim=1)

    inv = torch.exp(-log_s)
    theta = torch.zeros(n, 2, 3, dtype=torch.float64)
    theta[:, 0, 0] = inv * side_w / w
    theta[:, 1, 1] = inv * side_h / h
    theta[:, 0, 2] = -shift[:, 0] * theta[:, 0, 0]
    theta[:, 1, 2] = -shift[:, 1] * theta[:, 1, 1]

    out = torch.empty(n, c, side_h, side_w, dtype=torch.float32, device=images.device)
    for start in range(0, n, chunk):
        sl = slice(start, start + chunk)
        th = theta[sl].to(device=images.device, dtype=torch.float32)
        grid = F.affine_grid(th, [th.shape[0], c, side_h, side_w], align_corners=False)
        out[sl] = F.grid_sample(
            images[sl].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False
        )
    names = ("x_shift", "y_shift", "log_scale")
    return RegressionData("geo", out, targets.to(torch.float32), names)


@dataclass
class GeoPartition:
    """Client groups from :func:`projection_partition`.

    ``direction`` is the unit projection axis, ``cuts`` the ``M - 1`` projection
    values separating consecutive groups (client ``m`` holds projections in
    ``[cuts[m-1], cuts[m])``).
    """

    train: list[np.ndarray]
    test: list[np.ndarray] | None
    direction: np.ndarray
    cuts: np.ndarray


def projection_partition(
    targets: np.ndarray | torch.Tensor,
    n_clients: int,
    test_targets: np.ndarray | torch.Tensor | None = None,
) -> GeoPartition:
    """Sort samples by their target's projection on the top covariance eigenvector.

    The targets are centred, projected on the leading eigenvector of their
    covariance (sign fixed so that its largest-magnitude entry is positive),
    stably sorted, and cut into ``n_clients`` groups of equal size (sizes differ by
    at most one). Test samples, if given, go to the client whose projection
    interval contains theirs (the oracle protocol of seed 002, App. E.1), using
    the training mean, direction and cut points. Deterministic; no seed needed.
    """
    if n_clients < 1:
        raise ConfigError(f"n_clients must be positive, got {n_clients}")
    t = np.asarray(targets.cpu() if isinstance(targets, torch.Tensor) else targets, np.float64)
    if t.ndim != 2 or t.shape[0] < n_clients:
        raise DataError(
            f"projection partition needs (N, C) targets with N >= {n_clients} clients, "
            f"got shape {t.shape}"
        )
    mean = t.mean(axis=0)
    cov = np.atleast_2d(np.cov(t - mean, rowvar=False))
    _, vecs = np.linalg.eigh(cov)
    direction = vecs[:, -1]
    direction = direction * np.sign(direction[np.argmax(np.abs(direction))])
    proj = (t - mean) @ direction
    order = np.argsort(proj, kind="stable")
    groups = np.array_split(order, n_clients)
    cuts = np.array([0.5 * (proj[g[0]] + proj[p[-1]]) for p, g in pairwise(groups)])
    train = [np.sort(g).astype(np.int64) for g in groups]
    test = None
    if test_targets is not None:
        tt = test_targets
        tt = np.asarray(tt.cpu() if isinstance(tt, torch.Tensor) else tt, np.float64)
        owner = np.searchsorted(cuts, (tt - mean) @ direction, side="right")
        test = [np.flatnonzero(owner == m).astype(np.int64) for m in range(n_clients)]
    return GeoPartition(train, test, direction, cuts)


def tabular_regression(name: str = "diabetes3") -> RegressionData:
    """A small real regression set with three targets, needing no files.

    ``diabetes3``: scikit-learn's bundled diabetes data (442 patients). Its only
    target, disease progression after one year, is joined by two of the recorded
    measurements that correlate with it, body-mass index and mean blood pressure,
    to make a 3-target problem (head-only FedAvg needs C >= 2); the other eight
    variables (age, sex, six serum measurements) are the inputs. Inputs and
    targets are standardised with the statistics of the whole set.
    """
    if name.lower() != "diabetes3":
        raise DataError(f"unknown tabular regression set {name!r}; valid: diabetes3")
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    feats = list(bunch.feature_names)
    data = np.asarray(bunch.data, dtype=np.float64)
    target_cols = [feats.index("bmi"), feats.index("bp")]
    input_cols = [k for k in range(len(feats)) if k not in target_cols]
    y = np.column_stack([np.asarray(bunch.target, np.float64), data[:, target_cols]])
    x = data[:, input_cols]

    def standardise(a: np.ndarray) -> np.ndarray:
        return (a - a.mean(axis=0)) / a.std(axis=0)

    return RegressionData(
        "diabetes3",
        torch.from_numpy(standardise(x).astype(np.float32)),
        torch.from_numpy(standardise(y).astype(np.float32)),
        ("progression", "bmi", "bp"),
    )
