"""A data set plug-in: tabular vectors from scikit-learn, nothing to download.

fedsheaf calls a data set loader as ``load(root, split, download, **data.dataset_args)``
and takes what it returns as given (float32, no further normalisation). This one returns
``(x, y, n_classes)``: ``x`` standardised float32 vectors ``(N, F)``, ``y`` int64 labels in
``0..n_classes-1``. Both splits come from one deterministic cut of the whole set, so
``train`` and ``test`` never share a sample, on every rank and every run.
"""

from __future__ import annotations

import numpy as np

__all__ = ["load_tabular"]

SOURCES = ("synthetic", "wine", "breast_cancer")


def _whole_set(
    source: str, n_samples: int, n_features: int, n_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    if source == "synthetic":
        from sklearn.datasets import make_classification

        x, y = make_classification(
            n_samples=n_samples,
            n_features=n_features,
            n_informative=min(n_features, max(2, n_classes)),
            n_redundant=0,
            n_classes=n_classes,
            n_clusters_per_class=1,
            class_sep=1.5,
            random_state=seed,
        )
        return x, y
    if source == "wine":
        from sklearn.datasets import load_wine

        bunch = load_wine()
    elif source == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        bunch = load_breast_cancer()
    else:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    return bunch.data, bunch.target


def load_tabular(
    root: str,
    split: str,
    download: bool = False,
    *,
    source: str = "synthetic",
    n_samples: int = 1500,
    n_features: int = 16,
    n_classes: int = 6,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One split of a tabular data set, standardised with the training split's statistics.

    Parameters
    ----------
    root, download:
        ``data.root`` and ``data.download``; unused (nothing is read or fetched).
    split:
        ``"train"`` or ``"test"``.
    source:
        ``synthetic`` (scikit-learn's ``make_classification``: ``n_samples`` Gaussian
        clusters, one per class, in ``n_features`` dimensions), or one of scikit-learn's
        bundled sets, ``wine`` (178 × 13, 3 classes) and ``breast_cancer`` (569 × 30, 2).
    n_samples, n_features, n_classes:
        Size of the synthetic set (ignored for the bundled ones).
    test_fraction:
        Share of the samples in the test split.
    seed:
        Fixes the synthetic set and the train/test cut (not the run's seed: the data set
        stays the same across a study's seeds).

    Returns
    -------
    (x, y, n_classes)
        float32 ``(N, F)``, int64 ``(N,)``, and the number of classes.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    x, y = _whole_set(source, n_samples, n_features, n_classes, seed)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = round(test_fraction * len(y))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    x = (x - mean) / np.where(std > 0, std, 1.0)
    rows = np.sort(train if split == "train" else test)
    return x[rows].astype(np.float32), y[rows].astype(np.int64), int(y.max()) + 1
