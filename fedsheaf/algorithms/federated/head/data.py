"""Regression clients for head-only FedAvg: diabetes3 or the geo view, projection-partitioned.

Every rank builds the same split and partition from the seed (no data travels)
and keeps only the clients it hosts. Clients are equal-size groups of the
training targets sorted by their projection on the leading covariance
eigenvector (:func:`fedsheaf.data.geo.projection_partition`); test samples go
to the client whose projection interval holds theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedsheaf.algorithms.federated.head.objective import target_moments
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.datasets_registry import clear_cache, dataset_ref, load_split
from fedsheaf.data.geo import RegressionData, geo_view, projection_partition, tabular_regression
from fedsheaf.data.sources import Dataset
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.seeding import derive_seed, rng

__all__ = ["check_fully_active", "load_regression_clients", "regression_splits"]


def _holdout(data: RegressionData, fraction: float, seed: int) -> tuple[RegressionData, ...]:
    order = torch.from_numpy(rng(seed, "holdout").permutation(len(data.y)))
    n_test = max(1, round(fraction * len(data.y)))
    te, tr = torch.sort(order[:n_test]).values, torch.sort(order[n_test:]).values
    return tuple(
        RegressionData(data.name, data.x[i], data.y[i], data.target_names) for i in (tr, te)
    )


def _images(cfg: ExperimentConfig, split: str) -> Dataset:
    return load_split(cfg.data, split)


def regression_splits(cfg: ExperimentConfig) -> tuple[RegressionData, RegressionData]:
    """(train, test) of ``head.data``.

    ``diabetes3`` and geo views of ``digits`` have no test split: a seeded
    ``head.test_fraction`` of the samples is held out. Geo targets are
    standardised with the training statistics (diabetes3 comes standardised).
    """
    hc = cfg.head
    if hc.data == "diabetes3":
        return _holdout(tabular_regression("diabetes3"), hc.test_fraction, cfg.seed)  # type: ignore[return-value]
    train = geo_view(_images(cfg, "train").x, seed=derive_seed(cfg.seed, "geo", "train"))
    if dataset_ref(cfg.data.dataset) == "digits":
        train, test = _holdout(train, hc.test_fraction, cfg.seed)
    else:
        test = geo_view(_images(cfg, "test").x, seed=derive_seed(cfg.seed, "geo", "test"))
    clear_cache()
    mean, std = train.y.mean(dim=0), train.y.std(dim=0)
    return tuple(  # type: ignore[return-value]
        RegressionData(d.name, d.x, (d.y - mean) / std, d.target_names) for d in (train, test)
    )


def check_fully_active(Ys: Sequence[torch.Tensor], lam_H: float, lam_W: float) -> None:
    """Every client needs ``N_m ≥ C + 1`` and ``λ_min(Σ_m) > λ_H λ_W`` (SPEC §5)."""
    for m, y in enumerate(Ys):
        n, c = y.shape
        if n < c + 1:
            raise ConfigError(
                f"client {m} has {n} training samples, fewer than targets + 1 = {c + 1}; "
                "use fewer federated.clients"
            )
        lo = float(np.linalg.eigvalsh(target_moments(y)[1])[0])
        if not lo > lam_H * lam_W:
            raise ConfigError(
                f"client {m}'s target covariance has smallest eigenvalue {lo:.4g}, not above "
                f"head.lam_H * head.lam_W = {lam_H * lam_W:.4g} (outside the fully active "
                "regime of SPEC §5); lower head.lam_H or head.lam_W, or use fewer clients"
            )


def load_regression_clients(
    cfg: ExperimentConfig, clients: Sequence[int], device: torch.device
) -> dict[int, ClientData]:
    """The data of ``clients`` (float32 targets ``(N_m, C)``) on ``device``.

    All clients are checked for the fully active regime on every rank, so a bad
    setting stops every rank with the same message.
    """
    train, test = regression_splits(cfg)
    n_clients = cfg.federated.clients
    if n_clients > len(train.y):
        raise ConfigError(
            f"federated.clients={n_clients} exceeds the {len(train.y)} training samples "
            f"of {cfg.head.data}"
        )
    part = projection_partition(train.y, n_clients, test.y)
    check_fully_active([train.y[i] for i in part.train], cfg.head.lam_H, cfg.head.lam_W)
    assert part.test is not None
    out = {}
    for c in clients:
        itr, ite = torch.as_tensor(part.train[c]), torch.as_tensor(part.test[c])
        out[c] = ClientData(
            train.x[itr].to(device),
            train.y[itr].to(device),
            test.x[ite].to(device),
            test.y[ite].to(device),
            (),
        )
    return out
