"""Splitting a labelled data set across agents or clients.

Two schemes, both deterministic functions of their inputs and an integer seed:

* :func:`label_shift_partition` -- the label-shift partition of SPEC Eq. 23
  (Sheaf-FRL experiments): a shared pilot set, then disjoint agent pools with
  ``P_i(y) = s * Unif(C_i) + (1 - s) * Unif(Y)``, each split train/val/test.
* :func:`fedrep_shards` -- the FedRep authors' shard partition (SPEC section 4):
  single-class shards, ``S`` per client, test sets with the same classes.
* :func:`dirichlet_partition` -- the Dirichlet(α) label partition of the FL
  literature; :func:`pilot_then_pools` and :func:`client_shards` wrap it (or a
  user's partition, see :mod:`fedsheaf.data.partitions_registry`) for the graph
  and the server-based family.

Indices always refer to positions in the label vector(s) passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedsheaf.util.errors import ConfigError, DataError
from fedsheaf.util.seeding import rng as seeded_rng

__all__ = [
    "AgentShard",
    "ClientShard",
    "Partition",
    "apportion",
    "client_shards",
    "dirichlet_partition",
    "fedrep_shards",
    "label_shift_partition",
    "label_shift_probs",
    "pilot_then_pools",
]

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class AgentShard:
    """Index arrays (sorted, int64) of one agent's private train/val/test sets."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


@dataclass
class Partition:
    """Result of :func:`label_shift_partition`.

    ``pilot_classes`` are the classes pilots were drawn from; ``unused`` holds the
    samples of classes that no agent observes (only possible at ``shift = 1``).
    """

    pilots: np.ndarray
    pilot_classes: tuple[int, ...]
    agents: list[AgentShard]
    unused: np.ndarray = field(default_factory=lambda: _EMPTY.copy())


@dataclass
class ClientShard:
    """One FedRep client: train/test indices (sorted, int64) and its classes."""

    train: np.ndarray
    test: np.ndarray
    classes: tuple[int, ...]


# ---------------------------------------------------------------------------- helpers


def apportion(
    total: int, weights: Sequence[float] | np.ndarray, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Split ``total`` items in proportion to ``weights`` by largest remainders.

    Returns non-negative int64 counts summing to ``total``, each within one of its
    exact share. Equal remainders are ranked by a random order drawn from ``rng``
    (so no index is favoured systematically), or by index when ``rng`` is None.
    """
    w = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(w.shape[0], dtype=np.int64)
    if total == 0:
        return counts
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError("apportion needs non-negative weights with a positive sum")
    ideal = total * w / w.sum()
    counts[:] = np.floor(ideal + 1e-9)
    frac = np.round(ideal - counts, 9)  # equal shares must compare equal
    tie = rng.permutation(w.shape[0]) if rng is not None else np.arange(w.shape[0])
    left = total - int(counts.sum())
    if left > 0:
        counts[np.lexsort((tie, -frac))[:left]] += 1
    elif left < 0:  # only through the 1e-9 guard; take back from the largest overshoots
        counts[np.lexsort((tie, frac))[:-left]] -= 1
    return counts


def _bucket_sequence(n: int, fractions: Sequence[float]) -> np.ndarray:
    """Bucket id for positions ``0..n-1`` so that every window is split ~ ``fractions``.

    Bucket k's j-th slot sits at time ``(j + 1/2) / f_k`` (Sainte-Laguë order); the
    first n slots in time order form the sequence. Any run of consecutive positions
    gets within about one item of its proportional share of each bucket, so a
    class-sorted pool cut this way is stratified by class.
    """
    times, ids = [], []
    for k, f in enumerate(fractions):
        if f > 0:
            j = np.arange(math.ceil(n * f) + 2)
            times.append((j + 0.5) / f)
            ids.append(np.full(j.shape[0], k, dtype=np.int64))
    t = np.concatenate(times)
    b = np.concatenate(ids)
    order = np.lexsort((b, t))
    return b[order[:n]]


def _as_labels(labels: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise DataError(f"{what} must be a non-empty 1-D label vector, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"{what} must hold integer class ids, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise DataError(f"{what} contains a negative class id ({int(arr.min())})")
    return arr.astype(np.int64, copy=False)


def _real(value: object, name: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")


# ---------------------------------------------------------------- label-shift (Eq. 23)


def label_shift_probs(
    class_sets: Sequence[Sequence[int]], shift: float, n_classes: int
) -> np.ndarray:
    """Matrix ``P[i, y] = s * 1[y in C_i] / |C_i| + (1 - s) / n_classes``."""
    p = np.full((len(class_sets), n_classes), (1.0 - shift) / n_classes)
    for i, cs in enumerate(class_sets):
        p[i, list(cs)] += shift / len(cs)
    return p


def _check_label_shift_args(
    class_sets: Sequence[Sequence[int]],
    shift: float,
    pilot_fraction: float,
    split: Sequence[float],
    n_classes: int,
) -> list[list[int]]:
    if not 0.0 <= _real(shift, "shift") <= 1.0:
        raise ConfigError(f"shift strength s must lie in [0, 1], got {shift!r}")
    if not 0.0 <= _real(pilot_fraction, "pilot_fraction") < 1.0:
        raise ConfigError(f"pilot_fraction must lie in [0, 1), got {pilot_fraction!r}")
    if len(split) != 3 or any(not _real(f, "split") >= 0 for f in split):
        raise ConfigError(f"split must be three non-negative fractions, got {tuple(split)}")
    if abs(sum(float(f) for f in split) - 1.0) > 1e-6:
        raise ConfigError(f"split fractions must sum to 1, got {tuple(split)}")
    if len(class_sets) == 0:
        raise ConfigError("class_sets is empty: need one class set per agent")
    out = []
    for i, cs in enumerate(class_sets):
        ids = [int(c) for c in cs]
        if not ids:
            raise ConfigError(f"agent {i} has an empty class set")
        bad = [c for c in ids if not 0 <= c < n_classes]
        if bad:
            raise ConfigError(f"agent {i} class set has ids {bad} outside [0, {n_classes - 1}]")
        if len(set(ids)) != len(ids):
            raise ConfigError(f"agent {i} class set {ids} repeats a class")
        out.append(ids)
    return out


def label_shift_partition(
    labels: np.ndarray,
    class_sets: Sequence[Sequence[int]],
    shift: float,
    seed: int,
    pilot_fraction: float = 0.1,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    n_classes: int | None = None,
) -> Partition:
    """Pilot set plus label-shifted, disjoint agent shards (SPEC Eq. 23).

    1. Pilot classes are those every agent observes (``P_i(y) > 0`` for all i):
       every class when ``shift < 1``, the intersection of the ``C_i`` when
       ``shift = 1``; if that intersection is empty, all classes (recorded in
       ``pilot_classes``). A uniformly drawn ``pilot_fraction`` of the samples of
       the pilot classes becomes the shared pilot set.
    2. Each class's remaining samples, in seeded random order, are cut into
       consecutive blocks, one per agent, sized in proportion to ``P_i(y)``
       (largest-remainder rounding: every sample is used exactly once). Samples
       of a class no agent observes (``shift = 1`` only) go to ``unused``.
    3. Each agent's pool is split train/val/test by ``split``, stratified by class.

    Everything is a deterministic function of (labels, class_sets, shift, seed,
    pilot_fraction, split, n_classes).

    Parameters
    ----------
    labels:
        Integer class ids of the whole data set, shape ``(N,)``.
    class_sets:
        Target classes ``C_i`` of each agent.
    shift:
        Shift strength ``s`` in [0, 1]; 0 is i.i.d., 1 gives each agent only its
        target classes.
    n_classes:
        Size of the label space ``Y``; default ``labels.max() + 1``.
    """
    _check_seed(seed)
    y = _as_labels(labels, "labels")
    if n_classes is None:
        n_classes = int(y.max()) + 1
    elif int(y.max()) >= n_classes:
        raise DataError(f"labels contain class id {int(y.max())} >= n_classes={n_classes}")
    sets = _check_label_shift_args(class_sets, shift, pilot_fraction, split, n_classes)
    s = float(shift)
    probs = label_shift_probs(sets, s, n_classes)

    observed_by_all = np.all(probs > 0, axis=0)
    if not observed_by_all.any():
        observed_by_all[:] = True
    pilot_classes = tuple(int(c) for c in np.flatnonzero(observed_by_all))

    rng_pilot = np.random.default_rng([int(seed), 0])
    rng_split = np.random.default_rng([int(seed), 1])

    eligible = np.flatnonzero(observed_by_all[y])
    n_pilots = round(pilot_fraction * eligible.shape[0])
    pilots = np.sort(rng_pilot.choice(eligible, size=n_pilots, replace=False)).astype(np.int64)
    is_pilot = np.zeros(y.shape[0], dtype=bool)
    is_pilot[pilots] = True

    pools: list[list[np.ndarray]] = [[] for _ in sets]  # per agent, per class (ascending)
    unused = []
    for c in range(n_classes):
        members = np.flatnonzero((y == c) & ~is_pilot)
        members = rng_split.permutation(members)
        if probs[:, c].sum() <= 0:
            unused.append(members)
            continue
        bounds = np.cumsum(apportion(members.shape[0], probs[:, c], rng_split))
        for i, block in enumerate(np.split(members, bounds[:-1])):
            pools[i].append(block)

    agents = []
    for blocks in pools:
        pool = np.concatenate(blocks) if blocks else _EMPTY
        bucket = _bucket_sequence(pool.shape[0], split)
        agents.append(AgentShard(*(np.sort(pool[bucket == k]).astype(np.int64) for k in range(3))))
    unused_arr = np.sort(np.concatenate(unused)).astype(np.int64) if unused else _EMPTY.copy()
    return Partition(pilots, pilot_classes, agents, unused_arr)


# -------------------------------------------------------------------- FedRep shards


def _spread_duplicates(rows: np.ndarray, rng: np.random.Generator) -> None:
    """Swap entries between rows (in place) until no row repeats a label, if possible."""
    n_rows, width = rows.shape
    for _ in range(4 * n_rows):
        dup_rows = [a for a in range(n_rows) if len(set(rows[a].tolist())) < width]
        if not dup_rows:
            return
        progress = False
        for a in dup_rows:
            row_a = rows[a].tolist()
            p = next((k for k in range(width) if row_a[k] in row_a[:k]), None)
            if p is None:  # fixed meanwhile by an earlier swap
                continue
            x = row_a[p]
            for b in rng.permutation(n_rows):
                row_b = rows[b].tolist()
                if b == a or x in row_b:
                    continue
                q = next((k for k in range(width) if row_b[k] not in row_a), None)
                if q is not None:
                    rows[a, p], rows[b, q] = rows[b, q], x
                    progress = True
                    break
        if not progress:
            return


def _take(shards: list[np.ndarray], k: int | None, what: str) -> np.ndarray:
    """The first ``k`` items spread evenly over (already shuffled) shards, or all."""
    if k is None:
        return np.concatenate(shards)
    sizes = np.array([s.shape[0] for s in shards])
    if k > sizes.sum():
        raise ConfigError(f"{what}={k} exceeds the {int(sizes.sum())} samples a client holds")
    counts = np.minimum(apportion(k, sizes), sizes)
    return np.concatenate([s[:n] for s, n in zip(shards, counts, strict=True)])


def fedrep_shards(
    labels_train: np.ndarray,
    labels_test: np.ndarray,
    n_clients: int,
    classes_per_client: int,
    seed: int,
    train_per_client: int | None = None,
    test_per_client: int | None = None,
    n_classes: int | None = None,
    distinct: bool = False,
) -> list[ClientShard]:
    """FedRep/McMahan shard partition (SPEC section 4).

    Each class's training indices (seeded shuffle) are cut into
    ``S * N / n_classes`` near-equal single-class shards (``S`` =
    ``classes_per_client``), and likewise its test indices. A shuffled multiset of
    labels, each class repeated ``S * N / n_classes`` times, gives every client
    ``S`` labels, as the FedRep authors' code does: a client may draw a label twice
    (then holds two shards of one class: about 10 of 100 clients at S = 2, about 70
    of 100 hold fewer than 5 classes at S = 5). With ``distinct``, entries are
    swapped between clients so that no client repeats a class when that is possible.
    A client receiving label ``c`` for the k-th time in client order takes the k-th
    train shard and the k-th test shard of ``c``, so each class's test images are
    split across exactly the clients holding it.

    With CIFAR-10 (50,000/10,000), 100 clients and S = 2: 500 train and 100 test
    images per client. ``train_per_client``/``test_per_client`` optionally cut
    each client's sets down to that size, evenly over its shards.
    """
    _check_seed(seed)
    ytr = _as_labels(labels_train, "labels_train")
    yte = _as_labels(labels_test, "labels_test")
    if n_classes is None:
        n_classes = int(max(ytr.max(), yte.max())) + 1
    for name, val in (("n_clients", n_clients), ("classes_per_client", classes_per_client)):
        if isinstance(val, bool) or not isinstance(val, int | np.integer) or val < 1:
            raise ConfigError(f"{name} must be a positive integer, got {val!r}")
    n_shards = n_clients * classes_per_client
    if n_shards % n_classes:
        raise ConfigError(
            f"n_clients * classes_per_client = {n_shards} is not a multiple of the "
            f"{n_classes} classes, so classes cannot be cut into equal shard counts"
        )
    per_class = n_shards // n_classes
    rng = np.random.default_rng([int(seed), 2])

    def cut(y: np.ndarray, what: str) -> list[list[np.ndarray]]:
        out = []
        for c in range(n_classes):
            members = rng.permutation(np.flatnonzero(y == c))
            if members.shape[0] < per_class:
                raise DataError(
                    f"the {what} split has {members.shape[0]} samples of class {c}, fewer "
                    f"than the {per_class} shards it must be cut into (federated.clients × "
                    f"federated.classes_per_client / {n_classes} classes); use fewer clients "
                    "or classes per client, or more data (a greater data.limit, where one is set)"
                )
            out.append(np.array_split(members, per_class))
        return out

    train_shards = cut(ytr, "training")
    test_shards = cut(yte, "test")

    assignment = rng.permutation(np.repeat(np.arange(n_classes), per_class))
    assignment = assignment.reshape(n_clients, classes_per_client)
    if distinct:
        _spread_duplicates(assignment, rng)

    used = np.zeros(n_classes, dtype=np.int64)
    clients = []
    for row in assignment:
        tr, te = [], []
        for c in row.tolist():
            tr.append(train_shards[c][used[c]])
            te.append(test_shards[c][used[c]])
            used[c] += 1
        clients.append(
            ClientShard(
                train=np.sort(_take(tr, train_per_client, "train_per_client")).astype(np.int64),
                test=np.sort(_take(te, test_per_client, "test_per_client")).astype(np.int64),
                classes=tuple(sorted(set(row.tolist()))),
            )
        )
    return clients


# ------------------------------------------------------------------ Dirichlet(alpha)


def dirichlet_partition(
    labels: np.ndarray,
    n_parties: int,
    alpha: float,
    seed: int,
    min_size: int = 10,
    n_classes: int | None = None,
    max_attempts: int = 100,
) -> list[np.ndarray]:
    """Dirichlet(α) label partition: disjoint index arrays, one per party, covering all.

    For each class ``c`` (ascending), proportions ``p ~ Dir(α·1)`` over the parties
    are drawn, and the class's samples (seeded random order) are cut into consecutive
    blocks of ``apportion(n_c, p)`` samples (largest remainders, so every sample is
    used exactly once). Small α gives each party few classes; large α tends to the
    i.i.d. split. If a party ends with fewer than ``min_size`` samples the whole draw
    is repeated from the same generator, at most ``max_attempts`` times, then a
    ConfigError says so. Deterministic in (labels, n_parties, alpha, seed, min_size,
    n_classes, max_attempts).

    Parameters
    ----------
    labels:
        Integer class ids, shape ``(N,)``; the returned indices are positions in it.
    alpha:
        Concentration α > 0 of the symmetric Dirichlet.
    min_size:
        Fewest samples any party may hold (0: no requirement).
    """
    _check_seed(seed)
    y = _as_labels(labels, "labels")
    if isinstance(n_parties, bool) or not isinstance(n_parties, int | np.integer) or n_parties < 1:
        raise ConfigError(f"n_parties must be a positive integer, got {n_parties!r}")
    a = _real(alpha, "dirichlet alpha")
    if not (a > 0 and math.isfinite(a)):
        raise ConfigError(f"dirichlet alpha must be a positive number, got {alpha!r}")
    if isinstance(min_size, bool) or not isinstance(min_size, int | np.integer) or min_size < 0:
        raise ConfigError(f"min_size must be a non-negative integer, got {min_size!r}")
    if min_size * n_parties > y.shape[0]:
        raise ConfigError(
            f"min_size={min_size} samples for each of {n_parties} parties needs "
            f"{min_size * n_parties} samples, but there are {y.shape[0]}"
        )
    if n_classes is None:
        n_classes = int(y.max()) + 1
    gen = seeded_rng(seed, "dirichlet", int(n_parties))
    members = [np.flatnonzero(y == c) for c in range(n_classes)]
    smallest = 0
    for _ in range(max(1, int(max_attempts))):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_parties)]
        for m in members:
            order = gen.permutation(m)
            p = gen.dirichlet(np.full(n_parties, a))
            if not np.all(np.isfinite(p)) or p.sum() <= 0:  # alpha so small that all underflow
                p = np.zeros(n_parties)
                p[gen.integers(n_parties)] = 1.0
            bounds = np.cumsum(apportion(order.shape[0], p, gen))
            for i, block in enumerate(np.split(order, bounds[:-1])):
                parts[i].append(block)
        out = [np.sort(np.concatenate(b)).astype(np.int64) for b in parts]
        smallest = min(o.shape[0] for o in out)
        if smallest >= min_size:
            return out
    raise ConfigError(
        f"dirichlet partition (alpha={a:g}) left a party with {smallest} < min_size={min_size} "
        f"samples in each of {max(1, int(max_attempts))} draws; raise alpha or the data, or "
        "lower min_size or the number of parties"
    )


# ---------------------------------------------- generic partitions for both families

#: A partition callable: ``(labels, n_parties, seed, **kwargs) -> index arrays``.
PartitionFn = Callable[..., Sequence[np.ndarray]]


def pilot_then_pools(
    labels: np.ndarray,
    n_agents: int,
    seed: int,
    assign: Callable[[np.ndarray, int, int], Sequence[np.ndarray]],
    pilot_fraction: float = 0.1,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    n_classes: int | None = None,
) -> Partition:
    """Pilot holdout, then agent pools from ``assign``, each split train/val/test.

    A partition other than Eq. 23's gives every agent a chance of every class, so
    by SPEC's rule (pilots from the classes every agent may observe) the pilots are
    a uniformly drawn ``pilot_fraction`` of all samples, drawn exactly as
    :func:`label_shift_partition` draws them. ``assign(rest_labels, n_agents, seed)``
    then splits the remaining samples (indices into ``rest_labels``); samples it
    assigns to no agent go to ``unused``. Each pool is split by ``split`` stratified
    by class (class-sorted, seeded order within a class).
    """
    _check_seed(seed)
    y = _as_labels(labels, "labels")
    if n_classes is None:
        n_classes = int(y.max()) + 1
    _check_label_shift_args([[0]], 0.0, pilot_fraction, split, n_classes)
    rng_pilot = np.random.default_rng([int(seed), 0])
    rng_split = np.random.default_rng([int(seed), 1])
    eligible = np.arange(y.shape[0])
    n_pilots = round(pilot_fraction * eligible.shape[0])
    pilots = np.sort(rng_pilot.choice(eligible, size=n_pilots, replace=False)).astype(np.int64)
    keep = np.ones(y.shape[0], dtype=bool)
    keep[pilots] = False
    rest = np.flatnonzero(keep)
    pools = assign(y[rest], n_agents, seed)
    taken = np.zeros(rest.shape[0], dtype=bool)
    agents = []
    for local in pools:
        idx = np.asarray(local, dtype=np.int64)
        taken[idx] = True
        pool = rest[idx]
        # class-sorted, seeded order within a class: the bucket cut is stratified
        pool = pool[np.lexsort((rng_split.permutation(pool.shape[0]), y[pool]))]
        bucket = _bucket_sequence(pool.shape[0], split)
        agents.append(AgentShard(*(np.sort(pool[bucket == k]).astype(np.int64) for k in range(3))))
    unused = np.sort(rest[~taken]).astype(np.int64)
    return Partition(pilots, tuple(range(n_classes)), agents, unused)


def client_shards(
    labels_train: np.ndarray,
    labels_test: np.ndarray,
    train_pools: Sequence[np.ndarray],
    seed: int,
    train_per_client: int | None = None,
    test_per_client: int | None = None,
    n_classes: int | None = None,
) -> list[ClientShard]:
    """Server-family clients from a partition of the training split.

    Each class's test samples (seeded order) are cut among the clients in proportion
    to how many training samples of that class each holds (largest remainders), so a
    client's test set follows its training label distribution, as with
    :func:`fedrep_shards`. ``train_per_client``/``test_per_client`` cut a client's
    sets down to that size, spread over its classes in proportion.
    """
    _check_seed(seed)
    ytr = _as_labels(labels_train, "labels_train")
    yte = _as_labels(labels_test, "labels_test")
    if n_classes is None:
        n_classes = int(max(ytr.max(), yte.max())) + 1
    gen = np.random.default_rng([int(seed), 3])
    pools = [np.asarray(p, dtype=np.int64) for p in train_pools]
    counts = np.array(
        [np.bincount(ytr[p], minlength=n_classes)[:n_classes] for p in pools], dtype=np.float64
    ).reshape(len(pools), n_classes)
    test_parts: list[list[np.ndarray]] = [[] for _ in pools]
    for c in range(n_classes):
        members = gen.permutation(np.flatnonzero(yte == c))
        if counts[:, c].sum() <= 0:
            continue
        bounds = np.cumsum(apportion(members.shape[0], counts[:, c], gen))
        for i, block in enumerate(np.split(members, bounds[:-1])):
            test_parts[i].append(block)

    def by_class(idx: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        idx = gen.permutation(idx)
        return [s for s in (idx[y[idx] == c] for c in range(n_classes)) if s.shape[0]]

    clients = []
    for pool, tparts in zip(pools, test_parts, strict=True):
        test = np.concatenate(tparts) if tparts else _EMPTY
        tr = by_class(pool, ytr) or [_EMPTY]
        te = by_class(test, yte) or [_EMPTY]
        clients.append(
            ClientShard(
                train=np.sort(_take(tr, train_per_client, "train_per_client")).astype(np.int64),
                test=np.sort(_take(te, test_per_client, "test_per_client")).astype(np.int64),
                classes=tuple(sorted(set(ytr[pool].tolist()))),
            )
        )
    return clients
