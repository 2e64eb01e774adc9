"""Graph object, orientation, builders, file format and validation."""

import itertools
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from fedsheaf.config.presets import TABLE2
from fedsheaf.graphs import (
    PLACEMENTS,
    Graph,
    class_overlap_graph,
    complete,
    cut_edges,
    describe_placement,
    erdos_renyi,
    load_graph,
    pair,
    place_agents,
    ring,
    save_graph,
    validate_for_world,
)
from fedsheaf.util.errors import FedsheafError, GraphError

# ----------------------------------------------------------------- helpers


def weight(sets: list[set[int]], i: int, j: int) -> int:
    return len(sets[i] & sets[j])


def is_spanning_tree(n: int, edges: list[tuple[int, int]]) -> bool:
    return len(edges) == n - 1 and Graph("t", (1,) * n, tuple(edges)).is_connected()


def brute_force_max_tree_weight(sets: list[set[int]]) -> int:
    n = len(sets)
    pairs = list(itertools.combinations(range(n), 2))
    best = -1
    for tree in itertools.combinations(pairs, n - 1):
        if is_spanning_tree(n, list(tree)):
            best = max(best, sum(weight(sets, i, j) for i, j in tree))
    return best


def random_class_sets(rng: np.random.Generator, n: int, n_classes: int = 6) -> list[set[int]]:
    return [
        set(rng.choice(n_classes, size=int(rng.integers(1, n_classes + 1)), replace=False).tolist())
        for _ in range(n)
    ]


def tree_part(g: Graph, sets: list[set[int]]) -> list[tuple[int, int]]:
    """The first N-1 edges in the builder's order (-w, i, j) that form the Kruskal tree."""
    n = g.n
    ordered = sorted(g.edges, key=lambda e: (-weight(sets, *e), *e))
    comp = list(range(n))
    tree = []
    for i, j in ordered:
        if comp[i] != comp[j]:
            old = comp[j]
            comp = [comp[i] if c == old else c for c in comp]
            tree.append((i, j))
    return tree


# ----------------------------------------------------------------- class-overlap builder


@pytest.mark.parametrize("seed", range(12))
def test_class_overlap_tree_is_maximum_weight_spanning_tree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    sets = random_class_sets(rng, n)
    g = class_overlap_graph(sets, [8] * n, density=0.0)
    assert is_spanning_tree(n, list(g.edges))
    assert sum(weight(sets, i, j) for i, j in g.edges) == brute_force_max_tree_weight(sets)


def test_class_overlap_tree_matches_networkx_on_table2() -> None:
    sets = [set(a.classes) for a in TABLE2]
    g = class_overlap_graph(sets, [a.dim for a in TABLE2], density=0.0)
    assert len(g.edges) == 14 and g.is_connected()
    kn = nx.Graph()
    for i, j in itertools.combinations(range(15), 2):
        kn.add_edge(i, j, weight=weight(sets, i, j))
    nx_weight = nx.maximum_spanning_tree(kn).size(weight="weight")
    assert sum(weight(sets, i, j) for i, j in g.edges) == nx_weight


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("density", [0.0, 0.25, 0.4, 0.5, 0.67, 0.9, 1.0])
def test_class_overlap_density_and_fill_order(seed: int, density: float) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    sets = random_class_sets(rng, n)
    g = class_overlap_graph(sets, rng.integers(1, 50, size=n).tolist(), density=density)
    pairs = n * (n - 1) // 2
    # density reached with the fewest edges possible (never below a spanning tree)
    need = next(m for m in range(pairs + 1) if pairs == 0 or m / pairs >= density)
    assert len(g.edges) == max(need, n - 1)
    assert g.is_connected()
    assert pairs == 0 or g.density() >= density
    # the non-tree edges are exactly the best remaining pairs under (-w, i, j)
    tree = set(tree_part(g, sets))
    assert is_spanning_tree(n, sorted(tree))
    rest = sorted(
        (p for p in itertools.combinations(range(n), 2) if p not in tree),
        key=lambda e: (-weight(sets, *e), *e),
    )
    assert set(g.edges) - tree == set(rest[: len(g.edges) - len(tree)])


def test_class_overlap_is_deterministic_and_tie_broken_by_ids() -> None:
    sets = [{0, 1}, {0, 1}, {0, 1}, {0, 1}]  # every pair ties at weight 2
    g = class_overlap_graph(sets, [4, 4, 4, 4], density=0.0)
    # Kruskal over (-2, 0, 1), (-2, 0, 2), (-2, 0, 3), ... takes the star at node 0
    assert g.edges == ((0, 1), (0, 2), (0, 3))
    g2 = class_overlap_graph(sets, [4, 4, 4, 4], density=0.6)
    assert g2.edges == ((0, 1), (0, 2), (0, 3), (1, 2))
    sets6 = random_class_sets(np.random.default_rng(3), 6)
    # node 0 shares classes with everyone; 4 and 5 share three, the next heaviest edge
    assert sets6[0] == {0, 2, 3, 4, 5} and sets6[4:] == [{1, 3, 4}, {0, 1, 3, 4}]
    edges = ((0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (4, 5))
    assert class_overlap_graph(sets6, [5] * 6).edges == edges


def test_class_overlap_rejects_bad_arguments() -> None:
    with pytest.raises(GraphError, match="2 class sets but 3 dims"):
        class_overlap_graph([{0}, {1}], [1, 2, 3])
    with pytest.raises(GraphError, match="density must be in"):
        class_overlap_graph([{0}, {1}], [1, 2], density=1.5)
    with pytest.raises(GraphError, match="at least one node"):
        class_overlap_graph([], [])


def test_mnist15_table2_graph_facts() -> None:
    g = class_overlap_graph([a.classes for a in TABLE2], [a.dim for a in TABLE2], density=0.4)
    assert len(g.edges) == 42 and math.isclose(g.density(), 0.4)
    assert g.is_connected()


# ----------------------------------------------------------------- other builders


def test_ring_complete_pair() -> None:
    r = ring([4, 5, 6, 7])
    assert r.edges == ((0, 1), (0, 3), (1, 2), (2, 3))
    assert all(r.degree(i) == 2 for i in range(4))
    assert ring([3, 3]).edges == ((0, 1),)
    assert ring([3]).edges == () and ring([3]).is_connected()
    c = complete([1, 2, 3, 4, 5])
    assert len(c.edges) == 10 and c.density() == 1.0
    p = pair([128, 64])
    assert p.edges == ((0, 1),) and p.tails(0) == [1]
    with pytest.raises(GraphError, match="exactly 2 dims"):
        pair([1, 2, 3])


def test_erdos_renyi_is_seeded_connected_and_capped() -> None:
    dims = [8] * 10
    a = erdos_renyi(dims, 0.3, seed=7)
    assert a == erdos_renyi(dims, 0.3, seed=7)
    assert a.is_connected()
    others = {erdos_renyi(dims, 0.3, seed=s).edges for s in range(5)}
    assert len(others) > 1
    assert erdos_renyi(dims, 1.0, seed=0) == complete(dims, name="erdos-renyi")
    with pytest.raises(GraphError, match="no connected graph in 20 draws"):
        erdos_renyi(dims, 0.0, seed=0, max_tries=20)
    with pytest.raises(GraphError, match="p must be in"):
        erdos_renyi(dims, -0.1, seed=0)


# ----------------------------------------------------------------- orientation


def test_orientation_larger_dim_is_head_and_ties_go_to_smaller_id() -> None:
    #  0(d=16) - 1(d=32) - 2(d=32) - 3(d=8), plus 0 - 3
    g = Graph("o", (16, 32, 32, 8), ((0, 1), (1, 2), (2, 3), (0, 3)))
    assert g.is_head(1, 0) and not g.is_head(0, 1)  # strict
    assert g.is_head(1, 2) and not g.is_head(2, 1)  # tie: smaller id
    assert g.is_head(2, 3) and g.is_head(0, 3)
    assert g.tails(1) == [0, 2] and g.heads(1) == []
    assert g.tails(2) == [3] and g.heads(2) == [1]
    assert g.tails(3) == [] and g.heads(3) == [0, 2]
    assert g.tails(0) == [3] and g.heads(0) == [1]
    assert g.oriented_edges() == [(1, 0), (0, 3), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="no edge"):
        g.is_head(0, 2)
    with pytest.raises(IndexError):
        g.neighbours(4)


def test_tie_on_higher_id_side() -> None:
    g = Graph("t", (8, 8), ((1, 0),))
    assert g.edges == ((0, 1),)
    assert g.is_head(0, 1) and g.tails(0) == [1] and g.heads(1) == [0]


@pytest.mark.parametrize("seed", range(5))
def test_orientation_is_consistent_on_random_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dims = rng.integers(1, 4, size=9).tolist()  # many ties
    g = erdos_renyi(dims, 0.5, seed=seed)
    for i in range(g.n):
        assert sorted(g.tails(i) + g.heads(i)) == g.neighbours(i)
        assert g.degree(i) == len(g.neighbours(i))
        for j in g.tails(i):
            assert i in g.heads(j)
            assert g.dims[i] >= g.dims[j]
    assert sum(len(g.tails(i)) for i in range(g.n)) == len(g.edges)


def test_graph_canonicalises_and_validates() -> None:
    g = Graph("c", (3, 4, 5), ((2, 1), (0, 1)))
    assert g.edges == ((0, 1), (1, 2))
    assert g == Graph("c", (3, 4, 5), ((0, 1), (1, 2)))
    assert g.neighbours(1) == [0, 2]
    with pytest.raises(GraphError, match="self-loop"):
        Graph("c", (3, 4), ((1, 1),))
    with pytest.raises(GraphError, match="duplicate edge"):
        Graph("c", (3, 4), ((0, 1), (1, 0)))
    with pytest.raises(GraphError, match="does not exist"):
        Graph("c", (3, 4), ((0, 2),))
    with pytest.raises(GraphError, match="positive integers"):
        Graph("c", (3, 0), ())
    assert not Graph("c", (3, 4, 5), ((0, 1),)).is_connected()
    assert Graph("c", (3, 4, 5), ((0, 1),)).components() == [[0, 1], [2]]


# ----------------------------------------------------------------- files


def test_save_load_round_trip(tmp_path: Path) -> None:
    g = class_overlap_graph([{0, 1, 2}, {2, 3}, {0, 3}], [16, 32, 16], density=1.0, name="rt")
    path = tmp_path / "sub" / "rt.yaml"
    save_graph(g, path, comment="hello\nworld")
    loaded = load_graph(path)
    assert loaded == g and loaded.source == str(path)
    assert path.read_text().startswith("# hello\n# world\nname: rt\nnodes:\n  - {id: 0, dim: 16")
    assert [p.name for p in path.parent.iterdir()] == ["rt.yaml"]  # no temp files left
    bare = Graph("bare", (5,), ())
    save_graph(bare, tmp_path / "bare.yaml")
    assert load_graph(tmp_path / "bare.yaml") == bare


def test_save_refuses_disconnected(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="disconnected"):
        save_graph(Graph("d", (1, 1, 1), ((0, 1),)), tmp_path / "d.yaml")
    assert not (tmp_path / "d.yaml").exists()


def test_committed_graph_files() -> None:
    root = Path(__file__).resolve().parents[2] / "graphs"
    q = load_graph(root / "quick4.yaml")
    assert q.n == 4 and q.dims == (16, 24, 32, 24) and q.is_connected()
    assert len(q.edges) > q.n - 1  # not a tree
    ties = [e for e in q.edges if q.dims[e[0]] == q.dims[e[1]]]
    strict = [e for e in q.edges if q.dims[e[0]] != q.dims[e[1]]]
    assert ties and strict
    p = load_graph(root / "pair.yaml")
    assert p.dims == (128, 128) and p.edges == ((0, 1),)
    assert p.classes == ((4, 5, 6, 7, 8, 9), (0, 1, 2, 3, 4, 5))


GOOD_NODES = "nodes:\n  - {id: 0, dim: 4}\n  - {id: 1, dim: 8}\n  - {id: 2, dim: 8}\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nodes: [\n", "not valid YAML"),
        ("nodes: 2001-13-45\n", "not valid YAML: bad value"),
        ("nodes: !!int x\n", "not valid YAML: bad value"),
        ("nodes: !!python/object:os.system x\n", "not valid YAML"),
        ("nodes: " + "[" * 3000 + "\n", "nested too deeply"),
        ("", "is empty"),
        ("- 1\n- 2\n", "must be a YAML mapping"),
        (
            "name: x\n" + GOOD_NODES + "edges: [[0, 1], [1, 2]]\nextra: 1\n",
            "unknown top-level key 'extra'",
        ),
        ("name: x\n" + GOOD_NODES, "missing top-level key 'edges'"),
        ("name: [1]\n" + GOOD_NODES + "edges: []\n", "name must be a non-empty string"),
        ("nodes: []\nedges: []\n", "non-empty list"),
        ("nodes:\n  - {id: 0, dim: 4, colour: red}\nedges: []\n", "unknown key 'colour'"),
        ("nodes:\n  - {id: 0}\nedges: []\n", "missing 'dim'"),
        ("nodes:\n  - 7\nedges: []\n", "must be a mapping"),
        ("nodes:\n  - {id: 0, dim: 4.0}\nedges: []\n", "dims must be positive integers"),
        ("nodes:\n  - {id: 0, dim: -3}\nedges: []\n", "dims must be positive integers"),
        ("nodes:\n  - {id: 0, dim: 0}\nedges: []\n", "dims must be positive integers"),
        ("nodes:\n  - {id: 0, dim: true}\nedges: []\n", "dims must be positive integers"),
        ("nodes:\n  - {id: '0', dim: 4}\nedges: []\n", "non-integer id"),
        ("nodes:\n  - {id: 0, dim: 4}\n  - {id: 2, dim: 4}\nedges: [[0, 2]]\n", "exactly 0..1"),
        ("nodes:\n  - {id: 0, dim: 4}\n  - {id: 0, dim: 4}\nedges: []\n", "appears more than once"),
        ("nodes:\n  - {id: 0, dim: 4, classes: [1, x]}\nedges: []\n", "non-negative integers"),
        (
            "nodes:\n  - {id: 0, dim: 4, classes: [1]}\n  - {id: 1, dim: 4}\nedges: [[0, 1]]\n",
            "every node or for none",
        ),
        (GOOD_NODES + "edges: [[0, 1], [1, 5]]\n", "names node 5, which does not exist"),
        (GOOD_NODES + "edges: [[0, 1], [1, 1]]\n", "self-loop"),
        (GOOD_NODES + "edges: [[0, 1], [1, 2], [2, 1]]\n", "duplicate edge [2, 1]"),
        (GOOD_NODES + "edges: [[0, 1], [1, 2], [0, 1]]\n", "duplicate edge [0, 1]"),
        (GOOD_NODES + "edges: [[0, 1, 2]]\n", "must be a pair"),
        (GOOD_NODES + "edges: {0: 1}\n", "'edges' must be a list"),
        (GOOD_NODES + "edges: [[0, 1]]\n", "disconnected: components {0, 1} and {2}"),
        (GOOD_NODES + "edges: []\n", "components {0} and {1} and {2}"),
    ],
)
def test_validation_errors(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert words in message
    assert str(path) in message
    assert "\n" not in message


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(GraphError, match="does not exist"):
        load_graph(tmp_path / "nope.yaml")
    with pytest.raises(GraphError, match="is a directory"):
        load_graph(tmp_path)


def test_single_node_file_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("nodes:\n  - {id: 0, dim: 3}\nedges: []\n")
    g = load_graph(path)
    assert g.n == 1 and g.name == "one" and g.is_connected() and g.density() == 1.0


def test_nodes_may_be_listed_out_of_order(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("name: o\nnodes:\n  - {id: 1, dim: 9}\n  - {id: 0, dim: 3}\nedges: [[1, 0]]\n")
    assert load_graph(path) == Graph("o", (3, 9), ((0, 1),))


def test_validate_for_world(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    save_graph(ring([4, 4, 4, 4]), path)
    g = load_graph(path)
    for n_ranks in (1, 2, 3, 4):  # one rank per agent, or several agents per rank
        validate_for_world(g, n_ranks)
    with pytest.raises(GraphError) as info:
        validate_for_world(g, 5)
    assert str(info.value) == (
        f"graph {path} has 4 nodes but the job has 5 ranks; launch with mpiexec -n 4 (one "
        "rank per agent) or fewer ranks (1 to 4: several agents per rank)"
    )
    with pytest.raises(GraphError, match="graph 'ring' has 4 nodes but the job has 0 ranks"):
        validate_for_world(ring([4, 4, 4, 4]), 0)
    assert issubclass(GraphError, FedsheafError)


@pytest.mark.parametrize("strategy", PLACEMENTS)
@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4, 5, 7, 15])
def test_place_agents_blocks(strategy: str, n_ranks: int) -> None:
    g = load_graph(Path(__file__).resolve().parents[2] / "graphs" / "mnist15.yaml")
    placement = place_agents(g, n_ranks, strategy)
    assert sorted(i for block in placement for i in block) == list(range(15))
    sizes = [len(b) for b in placement]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1
    assert all(list(b) == sorted(b) for b in placement)
    assert placement == place_agents(g, n_ranks, strategy)  # the same on every rank
    if n_ranks == 15:
        assert placement == tuple((i,) for i in range(15))
    if strategy == "contiguous":
        assert [i for b in placement for i in b] == list(range(15))


@pytest.mark.parametrize("n_ranks", [2, 3, 5])
def test_min_cut_placement_cuts_fewer_edges(n_ranks: int) -> None:
    g = load_graph(Path(__file__).resolve().parents[2] / "graphs" / "mnist15.yaml")
    contiguous = cut_edges(g, place_agents(g, n_ranks, "contiguous"))
    assert cut_edges(g, place_agents(g, n_ranks, "min_cut")) < contiguous


def test_describe_placement() -> None:
    g = ring([4, 4, 4, 4])
    assert describe_placement(g, place_agents(g, 4)) == "one agent per rank"
    assert describe_placement(g, place_agents(g, 2)) == (
        "4 agents on 2 ranks (2 per rank, contiguous; 2 of 4 edges between ranks)"
    )
