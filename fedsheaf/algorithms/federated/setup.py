"""Build what one rank needs for a server-based run: its clients' data and the model.

The shard partition is a deterministic function of the seed, so every rank
derives it locally and keeps only the clients it hosts; no data travels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedsheaf.config.ranks import check_ranks
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.datasets_registry import (
    clear_cache,
    dataset_ref,
    dataset_spec,
    load_split,
    paired_splits,
)
from fedsheaf.data.partition import client_shards, fedrep_shards
from fedsheaf.data.partitions_registry import SERVER_PARTITIONS, partition_kwargs, run_partition
from fedsheaf.data.sources import Dataset
from fedsheaf.models.registry import build_server_model
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.seeding import derive_seed


@dataclass
class ClientData:
    """One client's tensors, already on its rank's device."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[int, ...]

    @property
    def n_train(self) -> int:
        return int(self.y_train.shape[0])


def check_setup(cfg: ExperimentConfig, n_ranks: int) -> None:
    """Checks before the clients' data: rank count against clients, data set, shard
    counts (a built-in data set's classes need no file; a plug-in's train split is
    loaded for its shape and classes)."""
    fc = cfg.federated
    check_ranks(cfg, n_ranks)
    if dataset_ref(cfg.data.dataset) == "digits":
        raise ConfigError(
            "data.dataset=digits has no test split and 8x8 images (the FedRep CNN needs "
            "at least 16x16), and server-based runs read the train and test splits; use "
            "mnist, fashionmnist, cifar10 or a data set of your own with both splits"
        )
    shape, n_classes = dataset_spec(cfg.data, "train")
    if fc.augment and len(shape) != 3:
        raise ConfigError(
            f"federated.augment (random crop and flip) needs images (C, H, W), but "
            f"data.dataset={cfg.data.dataset} gives samples of shape {shape}; set "
            "federated.augment=false"
        )
    if fc.partition.strip() != "shards":
        SERVER_PARTITIONS.resolve(fc.partition)  # a name that does not resolve: one line now
        partition_kwargs(fc.partition, fc.dirichlet_alpha, fc.partition_args, "federated")
        return
    if fc.classes_per_client > n_classes:
        raise ConfigError(
            f"federated.classes_per_client={fc.classes_per_client} exceeds the "
            f"{n_classes} classes of {cfg.data.dataset}"
        )
    if (fc.clients * fc.classes_per_client) % n_classes:
        raise ConfigError(
            f"federated.clients * federated.classes_per_client = "
            f"{fc.clients * fc.classes_per_client} must be a multiple of the {n_classes} "
            f"classes of {cfg.data.dataset} (each class is cut into equal shard counts)"
        )


def data_splits(cfg: ExperimentConfig) -> tuple[Dataset, Dataset]:
    """The train and test splits the clients' shards are cut from."""
    dc = cfg.data
    train, test = load_split(dc, "train"), load_split(dc, "test")
    return paired_splits(train, test, dataset_ref(dc.dataset))


def load_clients(
    cfg: ExperimentConfig, clients: Sequence[int], device: torch.device
) -> dict[int, ClientData]:
    """The data of ``clients`` (FedRep shards of the train and test splits, or
    ``federated.partition``'s pools with matching test sets) on ``device``.

    ``data.limit`` keeps the first N samples of each split. Every rank runs the
    same partition, so errors (missing files, too few samples) appear everywhere.
    """
    fc = cfg.federated
    train, test = data_splits(cfg)
    seed = derive_seed(cfg.seed, "partition")
    if fc.partition.strip() == "shards":
        shards = fedrep_shards(
            train.y.numpy(),
            test.y.numpy(),
            fc.clients,
            fc.classes_per_client,
            seed,
            train_per_client=fc.train_per_client,
            test_per_client=fc.test_per_client,
            n_classes=train.n_classes,
            distinct=fc.distinct_classes,
        )
    else:  # the named partition of the training split; test sets follow each client's labels
        kwargs = partition_kwargs(fc.partition, fc.dirichlet_alpha, fc.partition_args, "federated")
        pools = run_partition(
            SERVER_PARTITIONS, fc.partition, train.y.numpy(), fc.clients, seed, kwargs
        )
        shards = client_shards(
            train.y.numpy(),
            test.y.numpy(),
            pools,
            seed,
            train_per_client=fc.train_per_client,
            test_per_client=fc.test_per_client,
            n_classes=train.n_classes,
        )
        empty = [c for c, s in enumerate(shards) if not (len(s.train) and len(s.test))]
        if empty:
            raise ConfigError(
                f"config key 'federated.partition': {fc.partition!r} leaves "
                f"{len(empty)} client(s) without training or test samples (first: client "
                f"{empty[0]}); use more data (raise or remove data.limit), fewer clients or "
                "another partition"
            )
    out = {}
    for c in clients:
        s = shards[c]
        itr, ite = torch.as_tensor(s.train), torch.as_tensor(s.test)
        out[c] = ClientData(
            train.take(itr).to(device),
            train.y[itr].to(device),
            test.take(ite).to(device),
            test.y[ite].to(device),
            s.classes,
        )
    clear_cache()  # the full splits are no longer needed on this rank
    return out


def build_model(cfg: ExperimentConfig) -> nn.Module:
    """The common initial model (on CPU) as ``federated.model`` names it
    (:data:`~fedsheaf.models.registry.SERVER_MODELS`), checked: every client and the
    server start from it."""
    shape, n_classes = dataset_spec(cfg.data, "train")
    fc = cfg.federated
    return build_server_model(
        fc.model, shape, n_classes, fc.model_args, derive_seed(cfg.seed, "model")
    )
