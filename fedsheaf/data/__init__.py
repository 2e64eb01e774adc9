"""Data: data sets (built-ins and plug-ins), partitions across agents/clients, batching,
regression views.

The data module knows nothing about MPI: every rank derives its own shard from
the labels and the seed, identically.
"""

from fedsheaf.data.datasets_registry import DATASETS, dataset_shape, load_dataset
from fedsheaf.data.loaders import batches, n_batches
from fedsheaf.data.partition import (
    AgentShard,
    ClientShard,
    Partition,
    dirichlet_partition,
    fedrep_shards,
    label_shift_partition,
)
from fedsheaf.data.sources import Dataset

__all__ = [
    "DATASETS",
    "AgentShard",
    "ClientShard",
    "Dataset",
    "Partition",
    "batches",
    "dataset_shape",
    "dirichlet_partition",
    "fedrep_shards",
    "label_shift_partition",
    "load_dataset",
    "n_batches",
]
