"""The graph builders on networkx build exactly what the hand-written code they replaced
built: the same spanning tree and fill under the (-w_ij, i, j) tie order, the same
components in the same order, on many random instances full of ties."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.config.presets import TABLE2
from fedsheaf.graphs import Graph, class_overlap_graph, erdos_renyi

# ----------------------------------------------------------------- the replaced code, verbatim


def reference_fill_to_density(n: int, density: float) -> int:
    pairs = n * (n - 1) // 2
    m = math.floor(density * pairs)
    while m < pairs and m / pairs < density:
        m += 1
    while m > 0 and (m - 1) / pairs >= density:
        m -= 1
    return m


def reference_class_overlap_edges(
    class_sets: Sequence[Iterable[int]], n: int, density: float
) -> tuple[tuple[int, int], ...]:
    """fedsheaf.graphs.class_overlap_graph's edges before networkx: Kruskal with a
    hand-written union-find over the pairs sorted by (-w_ij, i, j), then the fill."""
    sets = [set(c) for c in class_sets]
    target = reference_fill_to_density(n, density)
    order = sorted(
        ((-len(sets[i] & sets[j]), i, j) for i in range(n) for j in range(i + 1, n)),
    )
    parent = list(range(n))

    def find(u: int) -> int:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    chosen: set[tuple[int, int]] = set()
    for _, i, j in order:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
            chosen.add((i, j))
    for _, i, j in order:
        if len(chosen) >= target:
            break
        chosen.add((i, j))
    return tuple(sorted(chosen))


def reference_components(n: int, edges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Graph.components before networkx: a depth-first search from each unseen node."""
    adjacency: list[list[int]] = [[] for _ in range(n)]
    for i, j in edges:
        adjacency[i].append(j)
        adjacency[j].append(i)
    adj = [sorted(a) for a in adjacency]
    seen = [False] * n
    out: list[list[int]] = []
    for start in range(n):
        if seen[start]:
            continue
        seen[start] = True
        stack, comp = [start], []
        while stack:
            u = stack.pop()
            comp.append(u)
            for v in adj[u]:
                if not seen[v]:
                    seen[v] = True
                    stack.append(v)
        out.append(sorted(comp))
    return out


# ----------------------------------------------------------------- the comparisons


def _random_sets(rng: np.random.Generator, n: int, n_classes: int) -> list[set[int]]:
    """Class sets from few classes: most pairs tie on their overlap."""
    return [
        set(rng.choice(n_classes, size=int(rng.integers(1, n_classes + 1)), replace=False).tolist())
        for _ in range(n)
    ]


DENSITIES = (0.0, 0.1, 0.25, 0.4, 0.5, 0.67, 0.9, 1.0)


@pytest.mark.parametrize("seed", range(300))
def test_class_overlap_graph_equals_the_reference_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 21))
    sets = _random_sets(rng, n, n_classes=int(rng.integers(1, 7)))
    for density in DENSITIES:
        g = class_overlap_graph(sets, [8] * n, density=density)
        assert g.edges == reference_class_overlap_edges(sets, n, density), (sets, density)


def test_class_overlap_graph_equals_the_reference_when_every_pair_ties() -> None:
    for n in range(1, 25):
        sets = [{0}] * n
        for density in DENSITIES:
            g = class_overlap_graph(sets, [4] * n, density=density)
            assert g.edges == reference_class_overlap_edges(sets, n, density)


@pytest.mark.parametrize("density", [k / 20 for k in range(21)])
def test_the_table2_graphs_equal_the_reference(density: float) -> None:
    """The 15 agents of Table 2 (graphs/mnist15.yaml at 0.4) at every density a study uses."""
    sets = [a.classes for a in TABLE2]
    g = class_overlap_graph(sets, [a.dim for a in TABLE2], density=density)
    assert g.edges == reference_class_overlap_edges(sets, len(sets), density)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.frozensets(st.integers(0, 4), min_size=1), min_size=1, max_size=16),
    st.floats(0.0, 1.0),
)
def test_class_overlap_graph_equals_the_reference_property(
    sets: list[frozenset[int]], density: float
) -> None:
    n = len(sets)
    g = class_overlap_graph(sets, [1] * n, density=density)
    assert g.edges == reference_class_overlap_edges(sets, n, density)


def _pair(n: int) -> st.SearchStrategy[tuple[int, int]]:
    return (
        st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
        .filter(lambda e: e[0] != e[1])
        .map(lambda e: (min(e), max(e)))
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 14).flatmap(lambda n: st.tuples(st.just(n), st.sets(_pair(n)))))
def test_components_equal_the_reference(case: tuple[int, set[tuple[int, int]]]) -> None:
    n, edges = case
    g = Graph("c", (1,) * n, tuple(sorted(edges)))
    assert g.components() == reference_components(n, g.edges)
    assert g.is_connected() == (len(reference_components(n, g.edges)) == 1)


@pytest.mark.parametrize("seed", range(40))
def test_erdos_renyi_draws_are_unchanged(seed: int) -> None:
    """erdos_renyi keeps its own seeded stream (networkx's G(n, p) draws differently); its
    connectivity test is networkx's: the first connected draw is the one it was."""
    rng = np.random.default_rng(seed)
    n, p = int(rng.integers(1, 12)), float(rng.uniform(0.2, 0.9))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    stream = np.random.default_rng(seed)
    while True:
        draw = stream.random(len(pairs))
        edges = tuple(e for e, u in zip(pairs, draw, strict=True) if u < p)
        if len(reference_components(n, edges)) == 1:
            break
    assert erdos_renyi([8] * n, p, seed).edges == edges
