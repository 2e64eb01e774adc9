"""Client data of server-based runs: the FedRep shards as the config asks for them."""

import torch

from fedsheaf.algorithms.federated.setup import load_clients
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig


def _classes(root, seed: int, distinct: bool) -> list[tuple[int, ...]]:
    cfg = build(
        ExperimentConfig,
        {
            "name": "c",
            "algorithm": "fedrep",
            "seed": seed,
            "data": {"dataset": "fashionmnist", "root": str(root), "limit": 2000},
            "federated": {"clients": 10, "classes_per_client": 2, "distinct_classes": distinct},
        },
    )
    data = load_clients(cfg, range(10), torch.device("cpu"))
    for c in data.values():  # the classes named are the classes held, train and test
        assert sorted(set(c.y_train.tolist())) == sorted(set(c.y_test.tolist())) == list(c.classes)
    return [data[c].classes for c in range(10)]


def test_clients_draw_labels_as_the_authors_code_unless_distinct(fmnist_root):
    # a shuffled multiset of 20 labels repeats one for some client in about 40 % of draws
    seed = next(
        (s for s in range(12) if any(len(c) < 2 for c in _classes(fmnist_root, s, False))),
        None,
    )
    assert seed is not None, "no client drew a label twice in 12 seeds"
    assert all(len(c) == 2 for c in _classes(fmnist_root, seed, True))
