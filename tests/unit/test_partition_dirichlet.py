"""Dirichlet(α) label partition, the generic pilot/pool and client wrappers, and the
partitions registry (``data.partition`` / ``federated.partition``)."""

import numpy as np
import pytest

from fedsheaf.data.partition import (
    client_shards,
    dirichlet_partition,
    fedrep_shards,
    label_shift_partition,
    pilot_then_pools,
)
from fedsheaf.data.partitions_registry import (
    GRAPH_PARTITIONS,
    SERVER_PARTITIONS,
    partition_kwargs,
    run_partition,
)
from fedsheaf.util.errors import ConfigError

LABELS = np.repeat(np.arange(10), 300)  # 3,000 samples, 10 balanced classes


def _shares(labels, parts, n_classes=10):
    return np.array([np.bincount(labels[p], minlength=n_classes) / len(p) for p in parts])


def test_same_seed_same_split_and_another_seed_another():
    a = dirichlet_partition(LABELS, 8, 0.5, seed=3)
    b = dirichlet_partition(LABELS, 8, 0.5, seed=3)
    c = dirichlet_partition(LABELS, 8, 0.5, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("alpha", [0.05, 0.5, 100.0])
def test_parts_are_disjoint_complete_sorted_int64(alpha):
    parts = dirichlet_partition(LABELS, 7, alpha, seed=1, min_size=1)
    assert len(parts) == 7
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(LABELS.shape[0]))


def test_large_alpha_is_near_uniform_small_alpha_is_skewed():
    flat = _shares(LABELS, dirichlet_partition(LABELS, 10, 1000.0, seed=0))
    assert np.abs(flat - 0.1).max() < 0.05
    skewed = [
        _shares(LABELS, dirichlet_partition(LABELS, 10, 0.05, seed=s, min_size=1)).max(axis=1)
        for s in range(3)
    ]
    assert np.mean(skewed) > 0.6  # each party dominated by one class
    assert np.mean(flat.max(axis=1)) < 0.15


def test_min_size_is_met_or_a_one_line_error():
    parts = dirichlet_partition(LABELS, 30, 0.1, seed=2, min_size=20, max_attempts=1000)
    assert min(len(p) for p in parts) >= 20
    with pytest.raises(ConfigError, match="min_size=90") as err:
        dirichlet_partition(LABELS, 30, 0.01, seed=2, min_size=90, max_attempts=5)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="needs 3010 samples"):
        dirichlet_partition(LABELS, 301, 0.5, seed=2, min_size=10)
    with pytest.raises(ConfigError, match="alpha must be a positive"):
        dirichlet_partition(LABELS, 3, 0.0, seed=2)


def test_pilots_first_then_pools_split_80_10_10():
    part = pilot_then_pools(
        LABELS, 4, 5, lambda y, n, s: dirichlet_partition(y, n, 0.5, s), pilot_fraction=0.1
    )
    assert part.pilot_classes == tuple(range(10)) and len(part.pilots) == 300
    # the pilots are drawn exactly as Eq. 23's partition draws them when every class is shared
    ref = label_shift_partition(LABELS, [[0]] * 4, 0.0, 5, pilot_fraction=0.1)
    assert np.array_equal(part.pilots, ref.pilots)
    sets = [part.pilots, part.unused] + [
        getattr(a, k) for a in part.agents for k in ("train", "val", "test")
    ]
    joined = np.concatenate(sets)
    assert np.array_equal(np.sort(joined), np.arange(LABELS.shape[0])) and part.unused.size == 0
    for a in part.agents:
        n = len(a.train) + len(a.val) + len(a.test)
        assert abs(len(a.train) - 0.8 * n) <= 2 and abs(len(a.val) - 0.1 * n) <= 2


def test_client_test_sets_follow_the_training_labels():
    ytr, yte = LABELS, np.repeat(np.arange(10), 60)
    pools = dirichlet_partition(ytr, 6, 0.3, seed=1)
    clients = client_shards(ytr, yte, pools, seed=1)
    assert np.array_equal(np.sort(np.concatenate([c.test for c in clients])), np.arange(600))
    for pool, c in zip(pools, clients, strict=True):
        assert c.classes == tuple(sorted(set(ytr[pool].tolist())))
        assert set(yte[c.test].tolist()) <= set(c.classes)
    cut = client_shards(ytr, yte, pools, seed=1, train_per_client=50, test_per_client=10)
    assert all(len(c.train) == 50 and len(c.test) == 10 for c in cut)


def test_registry_names_built_ins_and_keeps_todays_defaults():
    assert GRAPH_PARTITIONS.builtin == ["label_shift", "dirichlet"]
    assert SERVER_PARTITIONS.builtin == ["shards", "dirichlet"]
    assert GRAPH_PARTITIONS.resolve("label_shift") is label_shift_partition
    assert SERVER_PARTITIONS.resolve("shards") is fedrep_shards
    kwargs = partition_kwargs("dirichlet", 0.3, {"min_size": 2}, "data")
    via = run_partition(GRAPH_PARTITIONS, "dirichlet", LABELS, 5, 9, kwargs)
    direct = dirichlet_partition(LABELS, 5, 0.3, 9, min_size=2)
    assert all(np.array_equal(x, y) for x, y in zip(via, direct, strict=True))
    with pytest.raises(ConfigError, match="data.dirichlet_alpha"):
        partition_kwargs("dirichlet", 0.3, {"alpha": 2}, "data")
    with pytest.raises(ConfigError, match="'federated.partition'.*unknown.*did you mean"):
        SERVER_PARTITIONS.resolve("dirichlett")


def _user(tmp_path, monkeypatch, body):
    (tmp_path / "mypart.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys

    sys.modules.pop("mypart", None)
    importlib.invalidate_caches()


def test_user_partition_inline_and_its_faults_are_one_line(tmp_path, monkeypatch):
    _user(
        tmp_path,
        monkeypatch,
        "import numpy as np\n"
        "def halves(labels, n_parties, seed, reverse=False):\n"
        "    idx = np.arange(len(labels))\n"
        "    return np.array_split(idx[::-1] if reverse else idx, n_parties)\n"
        "def overlap(labels, n_parties, seed):\n"
        "    return [np.arange(10)] * n_parties\n"
        "def short(labels, n_parties, seed):\n"
        "    return [np.arange(10)]\n"
        "def outside(labels, n_parties, seed):\n"
        "    return [np.array([len(labels)])] + [[]] * (n_parties - 1)\n",
    )
    out = run_partition(GRAPH_PARTITIONS, "mypart:halves", LABELS, 3, 0, {"reverse": True})
    assert [len(p) for p in out] == [1000] * 3 and out[0][0] == 2999
    for ref, kwargs, message in [
        ("mypart:overlap", {}, "overlapping index arrays: index 0 in parties 0 and 1"),
        ("mypart:short", {}, "returned 1 index arrays for 3 parties"),
        ("mypart:outside", {}, "index 3000 for party 0, outside"),
        ("mypart:halves", {"bogus": 1}, "cannot be called as fn"),
        ("mypart:nothere", {}, "does not exist"),
    ]:
        with pytest.raises(ConfigError, match=message) as err:
            run_partition(GRAPH_PARTITIONS, ref, LABELS, 3, 0, kwargs)
        assert str(err.value).startswith("config key 'data.partition'") and "\n" not in str(
            err.value
        )
