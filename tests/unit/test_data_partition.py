"""Label-shift partition (SPEC Eq. 23) and FedRep shards (SPEC section 4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.data.partition import (
    apportion,
    fedrep_shards,
    label_shift_partition,
    label_shift_probs,
)
from fedsheaf.util.errors import ConfigError, DataError

TABLE2 = [
    [4, 5, 6, 7, 8], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [0, 1, 2, 7, 8, 9],
    [2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [3, 4, 5, 6, 7], [0, 2, 4, 6, 8], [5, 6, 7, 8, 9],
    [1, 2, 3, 4, 5], [0, 1, 2, 8, 9], [3, 4, 5, 6, 7, 8], [1, 4, 6, 8, 9], [0, 1, 2, 3, 7],
]  # fmt: skip
# ten agents, three consecutive classes each: every class is covered by exactly three
CYCLIC = [[i, (i + 1) % 10, (i + 2) % 10] for i in range(10)]


def mnist_like(n_per_class=6000, seed=0):
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(10), n_per_class))


def pool(agent):
    return np.concatenate([agent.train, agent.val, agent.test])


def all_parts(part):
    return [part.pilots, part.unused] + [
        a for ag in part.agents for a in (ag.train, ag.val, ag.test)
    ]


def same(p, q):
    return all(np.array_equal(a, b) for a, b in zip(all_parts(p), all_parts(q), strict=True))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(30, 400),
    n_classes=st.integers(2, 8),
    sets=st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=4), min_size=1, max_size=5),
    shift=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_every_sample_used_exactly_once(n, n_classes, sets, shift, seed):
    sets = [sorted(c % n_classes for c in s) for s in sets]
    sets = [sorted(set(s)) for s in sets]
    labels = np.random.default_rng(seed).integers(0, n_classes, n)
    part = label_shift_partition(labels, sets, shift, seed, n_classes=n_classes)
    everything = np.concatenate(all_parts(part))
    assert np.array_equal(np.sort(everything), np.arange(n))  # disjoint and complete
    assert all(a.dtype == np.int64 for a in all_parts(part))
    assert set(labels[part.pilots].tolist()) <= set(part.pilot_classes)
    eligible = np.isin(labels, part.pilot_classes).sum()
    assert part.pilots.shape[0] == round(0.1 * eligible)
    probs = label_shift_probs(sets, shift, n_classes)
    for i, ag in enumerate(part.agents):  # an agent never receives a class it has P_i(y)=0 for
        assert np.all(probs[i, labels[pool(ag)]] > 0)
    if part.unused.size:
        assert shift == 1.0 and not np.any(np.isin(labels[part.unused], sum(sets, [])))


def test_matches_eq23_proportions_exactly():
    labels = mnist_like()
    part = label_shift_partition(labels, TABLE2, 0.7, seed=3)
    probs = label_shift_probs(TABLE2, 0.7, 10)
    remaining = np.bincount(np.delete(labels, part.pilots), minlength=10)
    got = np.stack([np.bincount(labels[pool(a)], minlength=10) for a in part.agents])
    ideal = remaining * probs / probs.sum(axis=0)
    assert np.all(np.abs(got - ideal) < 1.0)  # largest-remainder rounding
    assert np.array_equal(got.sum(axis=0), remaining)


@pytest.mark.parametrize("shift", [0.0, 0.3, 0.7, 1.0])
def test_target_fraction_follows_shift(shift):
    labels = mnist_like()
    part = label_shift_partition(labels, CYCLIC, shift, seed=0)
    expected = shift + (1 - shift) * 3 / 10
    for ag, cs in zip(part.agents, CYCLIC, strict=True):
        frac = np.isin(labels[pool(ag)], cs).mean()
        assert abs(frac - expected) < 0.01
        assert abs(np.isin(labels[ag.train], cs).mean() - expected) < 0.01  # skew kept


def test_skew_grows_with_shift():
    labels = mnist_like(1000)
    fracs = []
    for s in np.linspace(0, 1, 6):
        part = label_shift_partition(labels, TABLE2, s, seed=1)
        fracs.append(
            np.mean(
                [
                    np.isin(labels[pool(a)], c).mean()
                    for a, c in zip(part.agents, TABLE2, strict=True)
                ]
            )
        )
    assert np.all(np.diff(fracs) > 0.02) and fracs[-1] == 1.0


def test_no_shift_is_uniform():
    labels = mnist_like()
    part = label_shift_partition(labels, TABLE2, 0.0, seed=5)
    counts = np.stack([np.bincount(labels[pool(a)], minlength=10) for a in part.agents])
    assert np.all(counts.max(axis=0) - counts.min(axis=0) <= 1)  # per class, across agents
    assert np.all(np.abs(counts - 360) <= 6)  # 5400/15 = 360, up to the random pilot draw
    assert counts.sum(axis=1).max() - counts.sum(axis=1).min() <= 5  # no agent favoured


def test_train_val_test_split_is_stratified():
    labels = mnist_like()
    part = label_shift_partition(labels, TABLE2, 0.7, seed=2)
    for ag in part.agents:
        n = pool(ag).shape[0]
        for arr, f in ((ag.train, 0.8), (ag.val, 0.1), (ag.test, 0.1)):
            assert abs(arr.shape[0] - f * n) <= 1
            per_class = np.bincount(labels[arr], minlength=10)
            assert np.all(np.abs(per_class - f * np.bincount(labels[pool(ag)], minlength=10)) <= 2)
    custom = label_shift_partition(labels, TABLE2, 0.7, seed=2, split=(0.6, 0.2, 0.2))
    ag = custom.agents[0]
    assert abs(ag.val.shape[0] - 0.2 * pool(ag).shape[0]) <= 1


def test_deterministic_in_seed():
    labels = mnist_like(500)
    a = label_shift_partition(labels, TABLE2, 0.7, seed=11)
    b = label_shift_partition(labels.copy(), [list(c) for c in TABLE2], 0.7, seed=11)
    c = label_shift_partition(labels, TABLE2, 0.7, seed=12)
    assert same(a, b)
    assert not same(a, c)
    assert not np.array_equal(a.pilots, c.pilots)


def test_pilot_classes_at_full_shift():
    labels = mnist_like(200)
    two = label_shift_partition(labels, [[4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 4, 5]], 1.0, seed=0)
    assert two.pilot_classes == (4, 5)
    assert set(labels[two.pilots].tolist()) == {4, 5}
    assert two.pilots.shape[0] == round(0.1 * 400)
    assert set(labels[pool(two.agents[0])].tolist()) == {4, 5, 6, 7, 8, 9}
    # disjoint target sets: no common class, pilots fall back to all classes
    disjoint = label_shift_partition(labels, [[0, 1], [2, 3]], 1.0, seed=0)
    assert disjoint.pilot_classes == tuple(range(10))
    assert set(labels[disjoint.unused].tolist()) == set(range(4, 10))
    # with s < 1 every agent observes every class
    assert label_shift_partition(labels, [[0, 1], [2, 3]], 0.9, seed=0).pilot_classes == tuple(
        range(10)
    )


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"shift": 1.5}, ConfigError, "shift"),
        ({"shift": float("nan")}, ConfigError, "shift"),
        ({"shift": -0.1}, ConfigError, "shift"),
        ({"class_sets": [[0, 10]]}, ConfigError, "outside"),
        ({"class_sets": [[1], []]}, ConfigError, "agent 1 has an empty class set"),
        ({"class_sets": [[1, 1]]}, ConfigError, "repeats"),
        ({"class_sets": []}, ConfigError, "class_sets is empty"),
        ({"split": (0.8, 0.1, 0.2)}, ConfigError, "sum to 1"),
        ({"split": (0.8, 0.2)}, ConfigError, "three"),
        ({"pilot_fraction": 1.0}, ConfigError, "pilot_fraction"),
        ({"seed": -1}, ConfigError, "seed"),
        ({"labels": np.arange(10.0)}, DataError, "integer"),
        ({"labels": np.array([0, 3, 12])}, DataError, "n_classes"),
        ({"labels": np.zeros((0,), np.int64)}, DataError, "non-empty"),
    ],
)
def test_invalid_inputs(kwargs, err, match):
    args = {"labels": np.arange(20) % 10, "class_sets": [[0, 1]], "shift": 0.5, "seed": 0}
    args.update(kwargs)
    with pytest.raises(err, match=match):
        label_shift_partition(**args, n_classes=10)


@given(total=st.integers(0, 10_000), w=st.lists(st.floats(0.01, 100), min_size=1, max_size=20))
def test_apportion_is_within_one(total, w):
    counts = apportion(total, w)
    ideal = total * np.array(w) / np.sum(w)
    assert counts.sum() == total and np.all(counts >= 0)
    assert np.all(np.abs(counts - ideal) < 1 + 1e-9)


# ------------------------------------------------------------------------ FedRep shards


def cifar_like(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.permutation(np.repeat(np.arange(10), 5000)),
        rng.permutation(np.repeat(np.arange(10), 1000)),
    )


def _check_shards(clients, ytr, yte, shards_per_client):
    """Every client has S shards of 250/50 images (two of one class when it drew that
    label twice); all images are used once; each class is cut into S*N/10 shards."""
    drawn = np.zeros(10, dtype=int)
    for c in clients:
        assert c.train.shape == (500,) and c.test.shape == (100,)
        per_class_train = np.bincount(ytr[c.train], minlength=10)
        per_class_test = np.bincount(yte[c.test], minlength=10)
        assert sorted(np.flatnonzero(per_class_train).tolist()) == list(c.classes)
        assert np.all(per_class_train[list(c.classes)] % 250 == 0)
        assert np.array_equal(per_class_test * 5, per_class_train)  # test shards follow
        drawn += per_class_train // 250
    assert np.all(drawn == 10 * shards_per_client)  # S*N/10 shards of every class
    train = np.concatenate([c.train for c in clients])
    test = np.concatenate([c.test for c in clients])
    assert np.array_equal(np.sort(train), np.arange(50_000))  # disjoint, all used
    assert np.array_equal(np.sort(test), np.arange(10_000))


def test_fedrep_cifar_protocol_draws_labels_as_the_authors_code():
    ytr, yte = cifar_like()
    clients = fedrep_shards(ytr, yte, n_clients=100, classes_per_client=2, seed=0)
    assert len(clients) == 100
    _check_shards(clients, ytr, yte, 2)
    # a shuffled multiset of 200 labels: P(two equal) = 19/199, about 9.5 of 100 clients
    repeats = [
        sum(len(c.classes) < 2 for c in fedrep_shards(ytr, yte, 100, 2, seed=s)) for s in range(20)
    ]
    assert 5 < np.mean(repeats) < 14 and min(repeats) < max(repeats)
    assert 3 <= len({len(c.classes) for c in fedrep_shards(ytr, yte, 100, 5, seed=0)})


def test_fedrep_distinct_classes_swaps_repeats_away():
    ytr, yte = cifar_like()
    drawn = fedrep_shards(ytr, yte, n_clients=100, classes_per_client=2, seed=0)
    clients = fedrep_shards(ytr, yte, 100, 2, seed=0, distinct=True)
    assert any(len(c.classes) < 2 for c in drawn)
    for c in clients:
        assert len(c.classes) == 2
        assert np.array_equal(np.bincount(ytr[c.train], minlength=10)[list(c.classes)], [250, 250])
        assert np.array_equal(np.bincount(yte[c.test], minlength=10)[list(c.classes)], [50, 50])
    _check_shards(clients, ytr, yte, 2)
    holders = np.bincount([k for c in clients for k in c.classes], minlength=10)
    assert np.all(holders == 20)  # S*N/10 shards per class
    five = fedrep_shards(ytr, yte, 100, 5, seed=0, distinct=True)
    assert {len(c.classes) for c in five} == {5}


def test_fedrep_determinism_and_options():
    ytr, yte = cifar_like(1)
    a = fedrep_shards(ytr, yte, 100, 2, seed=4, distinct=True)
    b = fedrep_shards(ytr, yte, 100, 2, seed=4, distinct=True)
    c = fedrep_shards(ytr, yte, 100, 2, seed=5, distinct=True)
    assert all(
        np.array_equal(x.train, y.train) and x.classes == y.classes
        for x, y in zip(a, b, strict=True)
    )
    assert any(x.classes != y.classes for x, y in zip(a, c, strict=True))
    x, y = fedrep_shards(ytr, yte, 100, 2, seed=4), fedrep_shards(ytr, yte, 100, 2, seed=4)
    assert all(np.array_equal(u.train, v.train) for u, v in zip(x, y, strict=True))
    big = fedrep_shards(ytr, yte, 1000, 2, seed=0, distinct=True)
    assert {(c.train.size, c.test.size, len(c.classes)) for c in big} == {(50, 10, 2)}
    five = fedrep_shards(ytr, yte, 100, 5, seed=0, distinct=True)
    assert {(c.train.size, c.test.size, len(c.classes)) for c in five} == {(500, 100, 5)}
    small = fedrep_shards(
        ytr, yte, 100, 2, seed=4, train_per_client=100, test_per_client=20, distinct=True
    )
    for s, full in zip(small, a, strict=True):
        assert s.train.size == 100 and s.test.size == 20 and s.classes == full.classes
        assert np.all(np.isin(s.train, full.train))
        assert np.array_equal(np.bincount(ytr[s.train], minlength=10)[list(s.classes)], [50, 50])


def test_fedrep_invalid():
    ytr, yte = cifar_like()
    with pytest.raises(ConfigError, match="multiple"):
        fedrep_shards(ytr, yte, 7, 2, seed=0)
    with pytest.raises(ConfigError, match="train_per_client"):
        fedrep_shards(ytr, yte, 100, 2, seed=0, train_per_client=501)
    with pytest.raises(DataError, match="class 0") as err:
        fedrep_shards(ytr[ytr > 0], yte, 100, 2, seed=0, n_classes=10)
    assert "the training split has 0 samples" in str(err.value)
    assert "federated.clients × federated.classes_per_client" in str(err.value)  # the keys
