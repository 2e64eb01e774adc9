"""Build what one rank needs for a server-based run: its clients' data and the model.

The shard partition is a deterministic function of the seed, so every rank
derives it locally and keeps only the clients it hosts; no data travels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedsheaf.config.ranks import check_ranks
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.partition import client_shards, fedrep_shards
from fedsheaf.data.partitions_registry import SERVER_PARTITIONS, partition_kwargs, run_partition
from fedsheaf.data.sources import Dataset, clear_cache, dataset_shape, load_dataset
from fedsheaf.models.fedrep_cnn import FedRepCNN, build_fedrep_cnn
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
    """Checks that need no data: rank count against clients, data set, shard counts."""
    fc = cfg.federated
    check_ranks(cfg, n_ranks)
    if cfg.data.dataset == "digits":
        raise ConfigError(
            "data.dataset=digits has no test split and 8x8 images (the FedRep CNN needs "
            "at least 16x16); use mnist, fashionmnist or cifar10"
        )
    if fc.partition.strip() != "shards":
        SERVER_PARTITIONS.resolve(fc.partition)  # a name that does not resolve: one line now
        partition_kwargs(fc.partition, fc.dirichlet_alpha, fc.partition_args, "federated")
        return
    n_classes = dataset_shape(cfg.data.dataset)[3]
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
    train = load_dataset(dc.dataset, dc.root, "train", dc.download, dc.limit)
    return train, load_dataset(dc.dataset, dc.root, "test", dc.download, dc.limit)


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


#: ``federated.model`` -> its builder (channels, (height, width), classes, seed=...).
FEDERATED_MODELS = {"fedrep_cnn": build_fedrep_cnn}


def build_model(cfg: ExperimentConfig) -> FedRepCNN:
    """The common initial model (on CPU): every client and the server start from it."""
    c, h, w, n_classes = dataset_shape(cfg.data.dataset)
    build = FEDERATED_MODELS[cfg.federated.model]
    return build(c, (h, w), n_classes, seed=derive_seed(cfg.seed, "model"))
