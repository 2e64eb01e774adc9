"""Agent graphs: the object, its orientation, builders, and the YAML file format.

Orientation (SPEC §2): on edge {i, j} the *head* is the node with the larger
latent dimension; on ties the smaller node id is the head. For an edge with
head i and tail j, ``j in tails(i)`` (N(i)⁻) and ``i in heads(j)`` (N(j)⁺).

File format::

    name: mnist15
    nodes:
      - {id: 0, dim: 128, classes: [4, 5, 6, 7, 8]}   # classes optional
    edges:
      - [0, 3]

Every problem with a file or a graph raises :class:`~fedsheaf.util.errors.GraphError`
with one message naming the file (or graph) and the problem.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import yaml

from fedsheaf.util import yamlio
from fedsheaf.util.atomic import atomic_write_text
from fedsheaf.util.errors import GraphError, relative_hint
from fedsheaf.util.units import count

#: The keys of a graph file (``nodes`` and ``edges`` required).
TOP_KEYS = ("name", "nodes", "edges")
_NODE_KEYS = ("id", "dim", "classes")


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Graph:
    """An undirected agent graph with per-node latent dimensions.

    Construction canonicalises ``edges`` (each pair as (i, j) with i < j, sorted)
    and rejects non-positive dims, self-loops, duplicate edges and edges naming
    missing nodes. It does not require connectivity; :func:`load_graph`,
    :func:`save_graph` and the builders do.

    Attributes
    ----------
    name:
        Graph name (written to the file).
    dims:
        Latent dimension d_i of node i (node ids are 0..n-1).
    edges:
        Undirected edges, canonical form.
    classes:
        Optional per-node target classes (metadata only; sorted, unique).
    source:
        File the graph was loaded from, if any (not part of equality).
    """

    name: str
    dims: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]
    classes: tuple[tuple[int, ...], ...] | None = None
    source: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        where = f"graph {self.name!r}" if self.source is None else f"graph file {self.source}"
        if not isinstance(self.name, str) or not self.name:
            raise GraphError(f"{where}: name must be a non-empty string")
        dims, edges, classes = _canonical(self.dims, self.edges, self.classes, where)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "classes", classes)
        graph = self.to_networkx()
        object.__setattr__(self, "_adj", tuple(tuple(sorted(graph.adj[i])) for i in graph))

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.dims)

    def _node(self, i: int) -> int:
        if not _is_int(i) or not 0 <= i < self.n:
            raise IndexError(f"graph {self.name!r} has no node {i!r} (nodes are 0..{self.n - 1})")
        return int(i)

    def degree(self, i: int) -> int:
        """Number of neighbours of node ``i``."""
        return len(self._adj[self._node(i)])  # type: ignore[attr-defined]

    def neighbours(self, i: int) -> list[int]:
        """Neighbours of node ``i`` in ascending id order."""
        return list(self._adj[self._node(i)])  # type: ignore[attr-defined]

    def has_edge(self, i: int, j: int) -> bool:
        """Whether {i, j} is an edge."""
        return self._node(j) in self._adj[self._node(i)]  # type: ignore[attr-defined]

    def is_head(self, i: int, j: int) -> bool:
        """Whether ``i`` is the head of edge {i, j} (larger d; ties: smaller id).

        Raises ``ValueError`` if {i, j} is not an edge.
        """
        if not self.has_edge(i, j):
            raise ValueError(f"graph {self.name!r} has no edge {{{i}, {j}}}")
        di, dj = self.dims[i], self.dims[j]
        return di > dj or (di == dj and i < j)

    def tails(self, i: int) -> list[int]:
        """N(i)⁻: neighbours j for which ``i`` is the head (ascending)."""
        return [j for j in self.neighbours(i) if self.is_head(i, j)]

    def heads(self, i: int) -> list[int]:
        """N(i)⁺: neighbours j that are heads over ``i`` (ascending)."""
        return [j for j in self.neighbours(i) if not self.is_head(i, j)]

    def oriented_edges(self) -> list[tuple[int, int]]:
        """Every edge as (head, tail), in canonical edge order."""
        return [(i, j) if self.is_head(i, j) else (j, i) for i, j in self.edges]

    def density(self) -> float:
        """edges / (n(n-1)/2); 1.0 for a single node."""
        pairs = self.n * (self.n - 1) // 2
        return 1.0 if pairs == 0 else len(self.edges) / pairs

    def to_networkx(self) -> nx.Graph:
        """The graph as a new :class:`networkx.Graph` on nodes 0..n-1 (no attributes)."""
        graph = nx.Graph()
        graph.add_nodes_from(range(len(self.dims)))
        graph.add_edges_from(self.edges)
        return graph

    def components(self) -> list[list[int]]:
        """Connected components, each sorted, ordered by smallest node id."""
        return sorted(sorted(c) for c in nx.connected_components(self.to_networkx()))

    def is_connected(self) -> bool:
        """Whether the graph is connected (a single node is)."""
        return bool(nx.is_connected(self.to_networkx()))


def _canonical(
    dims: Iterable[Any], edges: Iterable[Any], classes: Iterable[Any] | None, where: str
) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...] | None]:
    dims_list = list(dims)
    if not dims_list:
        raise GraphError(f"{where}: a graph needs at least one node")
    for i, d in enumerate(dims_list):
        if not _is_int(d) or d <= 0:
            raise GraphError(f"{where}: node {i} has dim {d!r}; dims must be positive integers")
    n = len(dims_list)
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    for e in edges:
        if len(e) != 2 or not all(_is_int(x) for x in e):
            raise GraphError(f"{where}: edge {list(e)!r} must be a pair of integer node ids")
        i, j = int(e[0]), int(e[1])
        for k in (i, j):
            if not 0 <= k < n:
                raise GraphError(
                    f"{where}: edge [{i}, {j}] names node {k}, which does not exist "
                    f"(nodes are 0..{n - 1})"
                )
        if i == j:
            raise GraphError(f"{where}: edge [{i}, {j}] is a self-loop")
        key = (min(i, j), max(i, j))
        if key in seen:
            a, b = seen[key]
            raise GraphError(f"{where}: duplicate edge [{i}, {j}] (already listed as [{a}, {b}])")
        seen[key] = (i, j)
    canon_classes = None
    if classes is not None:
        cls_list = list(classes)
        if len(cls_list) != n:
            raise GraphError(f"{where}: {len(cls_list)} class sets given for {n} nodes")
        canon = []
        for i, cs in enumerate(cls_list):
            cs = list(cs)
            if not all(_is_int(c) and c >= 0 for c in cs):
                raise GraphError(
                    f"{where}: node {i} has classes {cs!r}; classes must be non-negative integers"
                )
            canon.append(tuple(sorted({int(c) for c in cs})))
        canon_classes = tuple(canon)
    return tuple(int(d) for d in dims_list), tuple(sorted(seen)), canon_classes


def _require_connected(graph: Graph, where: str) -> None:
    comps = graph.components()
    if len(comps) > 1:
        listed = " and ".join("{" + ", ".join(map(str, c)) + "}" for c in comps)
        raise GraphError(f"{where} is disconnected: components {listed}")


# --------------------------------------------------------------------------- builders


def _check_dims_arg(dims: Sequence[int], builder: str) -> list[int]:
    dims = list(dims)
    if not dims:
        raise GraphError(f"{builder}: needs at least one node (dims is empty)")
    return dims


def _fill_to_density(n: int, density: float, builder: str) -> int:
    """Smallest edge count m with m / (n(n-1)/2) >= density."""
    if not (isinstance(density, (int, float)) and 0.0 <= density <= 1.0):
        raise GraphError(f"{builder}: density must be in [0, 1], got {density!r}")
    pairs = n * (n - 1) // 2
    m = math.floor(density * pairs)
    while m < pairs and m / pairs < density:
        m += 1
    while m > 0 and (m - 1) / pairs >= density:
        m -= 1
    return m


def class_overlap_graph(
    class_sets: Sequence[Iterable[int]],
    dims: Sequence[int],
    density: float = 0.4,
    name: str = "class-overlap",
) -> Graph:
    """Class-overlap graph of SPEC §3.

    Weights w_ij = |C_i ∩ C_j|. Start from a maximum-weight spanning tree of the
    complete weighted graph (Kruskal, pairs ordered by (-w_ij, i, j)), then add
    the remaining pairs in that same order until
    edges / (N(N-1)/2) >= ``density``. Deterministic.

    The tree is networkx's minimum spanning tree under each pair's rank in that order:
    the ranks are distinct, so that tree is unique, and it is the one Kruskal's method
    takes scanning the pairs in that order (it keeps a pair exactly when no earlier
    pair joins its ends) whichever algorithm networkx uses and however it breaks ties.
    """
    builder = f"class-overlap graph {name!r}"
    dims = _check_dims_arg(dims, builder)
    sets = [set(c) for c in class_sets]
    if len(sets) != len(dims):
        raise GraphError(f"{builder}: {len(sets)} class sets but {len(dims)} dims")
    n = len(dims)
    target = _fill_to_density(n, density, builder)
    order = sorted(
        ((-len(sets[i] & sets[j]), i, j) for i in range(n) for j in range(i + 1, n)),
    )
    ranked = nx.Graph()
    ranked.add_nodes_from(range(n))
    ranked.add_weighted_edges_from((i, j, rank) for rank, (_, i, j) in enumerate(order))
    tree = nx.minimum_spanning_tree(ranked)
    chosen = {(min(i, j), max(i, j)) for i, j in tree.edges}
    for _, i, j in order:
        if len(chosen) >= target:
            break
        chosen.add((i, j))
    return Graph(name, tuple(dims), tuple(sorted(chosen)), tuple(tuple(c) for c in class_sets))


def ring(
    dims: Sequence[int], name: str = "ring", classes: Sequence[Iterable[int]] | None = None
) -> Graph:
    """Cycle 0-1-...-(n-1)-0 (a path for n = 2, no edges for n = 1)."""
    n = len(_check_dims_arg(dims, f"ring graph {name!r}"))
    edges = {(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n) if n > 1}
    return Graph(name, tuple(dims), tuple(sorted(edges)), _opt(classes))


def complete(
    dims: Sequence[int], name: str = "complete", classes: Sequence[Iterable[int]] | None = None
) -> Graph:
    """Complete graph on len(dims) nodes."""
    n = len(_check_dims_arg(dims, f"complete graph {name!r}"))
    edges = tuple((i, j) for i in range(n) for j in range(i + 1, n))
    return Graph(name, tuple(dims), edges, _opt(classes))


def erdos_renyi(
    dims: Sequence[int],
    p: float,
    seed: int,
    name: str = "erdos-renyi",
    classes: Sequence[Iterable[int]] | None = None,
    max_tries: int = 1000,
) -> Graph:
    """G(n, p) graph, resampled from one seeded stream until connected.

    Each try draws one uniform per pair (i < j, lexicographic) from
    ``np.random.default_rng(seed)``; the first connected draw is returned.
    Raises :class:`GraphError` after ``max_tries`` disconnected draws.
    """
    builder = f"erdos-renyi graph {name!r}"
    n = len(_check_dims_arg(dims, builder))
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise GraphError(f"{builder}: p must be in [0, 1], got {p!r}")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        draw = rng.random(len(pairs))
        edges = tuple(e for e, u in zip(pairs, draw, strict=True) if u < p)
        graph = Graph(name, tuple(dims), edges, _opt(classes))
        if graph.is_connected():
            return graph
    raise GraphError(
        f"{builder}: no connected graph in {max_tries} draws with n={n}, p={p}, seed={seed}; "
        f"raise p (connectivity needs roughly p > ln(n)/n = {math.log(max(n, 2)) / n:.2f})"
    )


def pair(
    dims: Sequence[int], name: str = "pair", classes: Sequence[Iterable[int]] | None = None
) -> Graph:
    """Two nodes joined by one edge."""
    if len(dims) != 2:
        raise GraphError(f"pair graph {name!r}: needs exactly 2 dims, got {len(dims)}")
    return Graph(name, tuple(dims), ((0, 1),), _opt(classes))


def _opt(classes: Sequence[Iterable[int]] | None) -> tuple[tuple[int, ...], ...] | None:
    return None if classes is None else tuple(tuple(c) for c in classes)


# --------------------------------------------------------------------------- files


def save_graph(graph: Graph, path: str | os.PathLike[str], comment: str | None = None) -> None:
    """Write ``graph`` to ``path`` atomically in the YAML format above.

    ``comment`` (optional, may span lines) is written as leading ``#`` lines.
    Refuses disconnected graphs, so every saved file loads again.
    """
    _require_connected(graph, f"graph {graph.name!r}")
    lines = [f"# {c}".rstrip() for c in comment.splitlines()] if comment else []
    lines.append(yamlio.dump({"name": graph.name}, width=1_000_000).rstrip("\n"))
    lines.append("nodes:")
    for i, d in enumerate(graph.dims):
        node = f"id: {i}, dim: {d}"
        if graph.classes is not None:
            node += f", classes: [{', '.join(map(str, graph.classes[i]))}]"
        lines.append(f"  - {{{node}}}")
    lines.append("edges:" if graph.edges else "edges: []")
    lines.extend(f"  - [{i}, {j}]" for i, j in graph.edges)
    atomic_write_text(path, "\n".join(lines) + "\n")


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read and validate a graph file; any problem raises :class:`GraphError`."""
    where = f"graph file {path}"
    if Path(path).exists() and not (Path(path).is_file() or Path(path).is_dir()):
        raise GraphError(f"{where} is not a regular file (a pipe or device would block)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GraphError(f"{where} does not exist{relative_hint(path)}") from None
    except IsADirectoryError:
        raise GraphError(f"{where} is a directory, not a file") from None
    except UnicodeDecodeError:
        raise GraphError(f"{where} is not UTF-8 text") from None
    except OSError as e:
        raise GraphError(f"{where} cannot be read: {e.strerror}") from None
    try:
        doc = yamlio.load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise GraphError(f"{where} is not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise GraphError(f"{where} is not a graph file: YAML nested too deeply") from None
    except yamlio.BAD_VALUE as e:
        # PyYAML's scalar constructors (timestamps, !!int, !!float) raise these directly
        raise GraphError(f"{where} is not valid YAML: bad value ({e})") from None
    if doc is None:
        raise GraphError(f"{where} is empty; expected keys name, nodes, edges")
    if not isinstance(doc, dict):
        raise GraphError(
            f"{where} must be a YAML mapping with keys name, nodes, edges; "
            f"found {type(doc).__name__}"
        )
    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        raise GraphError(
            f"{where}: unknown top-level key {unknown[0]!r} (allowed: {', '.join(TOP_KEYS)})"
        )
    for key in ("nodes", "edges"):
        if key not in doc:
            raise GraphError(f"{where}: missing top-level key {key!r}")
    name = doc.get("name", Path(path).stem)
    if not isinstance(name, str) or not name:
        raise GraphError(f"{where}: name must be a non-empty string, got {name!r}")
    nodes, edges = doc["nodes"], doc["edges"]
    if not isinstance(nodes, list) or not nodes:
        raise GraphError(f"{where}: 'nodes' must be a non-empty list of {{id, dim}} mappings")
    by_id: dict[int, dict[str, Any]] = {}
    for k, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise GraphError(f"{where}: node entry {k} must be a mapping like {{id: 0, dim: 16}}")
        bad = [key for key in node if key not in _NODE_KEYS]
        if bad:
            raise GraphError(
                f"{where}: node entry {k} has unknown key {bad[0]!r} "
                f"(allowed: {', '.join(_NODE_KEYS)})"
            )
        for key in ("id", "dim"):
            if key not in node:
                raise GraphError(f"{where}: node entry {k} is missing {key!r}")
        nid, dim = node["id"], node["dim"]
        if not _is_int(nid):
            raise GraphError(f"{where}: node entry {k} has non-integer id {nid!r}")
        if not _is_int(dim) or dim <= 0:
            raise GraphError(f"{where}: node {nid} has dim {dim!r}; dims must be positive integers")
        if "classes" in node:
            cs = node["classes"]
            if not isinstance(cs, list) or not all(_is_int(c) and c >= 0 for c in cs):
                raise GraphError(
                    f"{where}: node {nid} has classes {cs!r}; "
                    "classes must be a list of non-negative integers"
                )
        if nid in by_id:
            raise GraphError(f"{where}: node id {nid} appears more than once")
        by_id[nid] = node
    n = len(by_id)
    if sorted(by_id) != list(range(n)):
        missing = sorted(set(range(n)) - set(by_id))
        raise GraphError(
            f"{where}: node ids must be exactly 0..{n - 1}; got {sorted(by_id)} (missing {missing})"
        )
    with_classes = [i for i in range(n) if "classes" in by_id[i]]
    if with_classes and len(with_classes) != n:
        lacking = sorted(set(range(n)) - set(with_classes))
        raise GraphError(
            f"{where}: classes must be given for every node or for none; missing on {lacking}"
        )
    if not isinstance(edges, list):
        raise GraphError(f"{where}: 'edges' must be a list of [i, j] pairs")
    for edge in edges:
        if not isinstance(edge, list) or len(edge) != 2 or not all(_is_int(x) for x in edge):
            raise GraphError(f"{where}: edge {edge!r} must be a pair [i, j] of integer node ids")
    graph = Graph(
        name=name,
        dims=tuple(by_id[i]["dim"] for i in range(n)),
        edges=tuple((e[0], e[1]) for e in edges),
        classes=tuple(tuple(by_id[i]["classes"]) for i in range(n)) if with_classes else None,
        source=str(path),
    )
    _require_connected(graph, where)
    return graph


def validate_for_world(graph: Graph, n_ranks: int) -> None:
    """Raise :class:`GraphError` unless the job's ``n_ranks`` can hold ``graph``'s agents:
    one rank per agent, or fewer ranks holding several agents each (at least one)."""
    if not 1 <= n_ranks <= graph.n:
        what = f"graph {graph.source}" if graph.source else f"graph {graph.name!r}"
        raise GraphError(
            f"{what} has {graph.n} nodes but the job has {count(n_ranks, 'rank')}; "
            f"launch with mpiexec -n {graph.n} (one rank per agent) or fewer ranks "
            f"(1 to {graph.n}: several agents per rank)"
        )


#: How :func:`place_agents` assigns agents to ranks (config key ``train.placement``).
PLACEMENTS = ("contiguous", "min_cut")


def _block_sizes(n: int, parts: int) -> list[int]:
    """``n`` items in ``parts`` blocks as even as possible, the larger blocks first."""
    return [n // parts + (1 if k < n % parts else 0) for k in range(parts)]


def _min_cut_split(g: nx.Graph, nodes: list[int], parts: int) -> list[list[int]]:
    """``nodes`` in ``parts`` groups of :func:`_block_sizes` sizes with few edges cut: the
    contiguous blocks, improved by recursive Kernighan-Lin bisection (which swaps pairs of
    nodes, so the sizes stay as they start). Deterministic: networkx's seed is fixed."""
    if parts == 1:
        return [sorted(nodes)]
    left_parts = (parts + 1) // 2
    n_left = sum(_block_sizes(len(nodes), parts)[:left_parts])
    start = (set(nodes[:n_left]), set(nodes[n_left:]))
    a, b = nx.algorithms.community.kernighan_lin_bisection(
        g.subgraph(nodes), partition=start, max_iter=20, seed=0
    )
    if len(a) != n_left or (len(b) == n_left and min(b) < min(a)):
        a, b = b, a  # (networkx returns the two sides in either order)
    return _min_cut_split(g, sorted(a), left_parts) + _min_cut_split(
        g, sorted(b), parts - left_parts
    )


def place_agents(
    graph: Graph, n_ranks: int, strategy: str = "contiguous"
) -> tuple[tuple[int, ...], ...]:
    """The agents each of ``n_ranks`` ranks holds (agent ids in increasing order).

    ``contiguous``: blocks of consecutive ids, the first ``n % n_ranks`` ranks one agent
    more. ``min_cut``: blocks of the same sizes chosen to cut few graph edges (edges
    between ranks are what crosses MPI). With ``n_ranks == graph.n`` both give rank i
    agent i. A pure function of the graph and its arguments, so every rank computes the
    same placement.
    """
    validate_for_world(graph, n_ranks)
    if strategy not in PLACEMENTS:
        raise GraphError(f"unknown placement {strategy!r}; valid: {', '.join(PLACEMENTS)}")
    if strategy == "min_cut" and n_ranks < graph.n:
        g = nx.Graph()
        g.add_nodes_from(range(graph.n))
        g.add_edges_from(graph.edges)
        return tuple(tuple(b) for b in _min_cut_split(g, list(range(graph.n)), n_ranks))
    blocks, start = [], 0
    for size in _block_sizes(graph.n, n_ranks):
        blocks.append(tuple(range(start, start + size)))
        start += size
    return tuple(blocks)


def cut_edges(graph: Graph, placement: Sequence[Sequence[int]]) -> int:
    """How many of ``graph``'s edges join agents on different ranks."""
    owner = {i: r for r, agents in enumerate(placement) for i in agents}
    return sum(owner[i] != owner[j] for i, j in graph.edges)


def describe_placement(
    graph: Graph, placement: Sequence[Sequence[int]], strategy: str = "contiguous"
) -> str:
    """``"15 agents on 3 ranks (5 per rank, contiguous; 34 of 42 edges between ranks)"``,
    or ``"one agent per rank"``."""
    if len(placement) == graph.n:
        return "one agent per rank"
    sizes = sorted({len(b) for b in placement})
    per = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    return (
        f"{count(graph.n, 'agent')} on {count(len(placement), 'rank')} ({per} per rank, "
        f"{strategy}; {cut_edges(graph, placement)} of {len(graph.edges)} edges between ranks)"
    )
