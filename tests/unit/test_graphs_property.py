"""Property tests of the graph file parser (hypothesis)."""

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsheaf.graphs import Graph, load_graph, save_graph
from fedsheaf.util.errors import GraphError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 8))
    dims = draw(st.lists(st.integers(1, 600), min_size=n, max_size=n))
    # a random spanning tree (node k attaches to an earlier node) plus random extra pairs
    edges = {(draw(st.integers(0, k - 1)), k) for k in range(1, n)}
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if pairs:
        edges |= set(draw(st.lists(st.sampled_from(pairs), max_size=len(pairs))))
    classes = draw(
        st.none()
        | st.lists(st.lists(st.integers(0, 20), max_size=6, unique=True), min_size=n, max_size=n)
    )
    name = draw(st.text(min_size=1, max_size=20))
    return Graph(
        name, tuple(dims), tuple(edges), None if classes is None else tuple(map(tuple, classes))
    )


def _roundtrip(text: str) -> Graph | None:
    """Load ``text`` from a file; return the graph, or None on GraphError."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_graph(path)
        except GraphError as e:
            assert str(path) in str(e)
            return None


@SETTINGS
@given(graphs())
def test_valid_graphs_round_trip(graph: Graph) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.yaml"
        save_graph(graph, path, comment="property test")
        assert load_graph(path) == graph


def _text(graph: Graph) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.yaml"
        save_graph(graph, path)
        return path.read_text(encoding="utf-8")


YAMLISH = st.sampled_from(
    list("[]{}:,-#'\"&*!|>%@` \n\t0123456789abcxyz.") + ["id", "dim", "\u00e9"]
)


@SETTINGS
@given(graphs(), st.data())
def test_text_corruptions_load_or_raise_graph_error(graph: Graph, data: st.DataObject) -> None:
    text = _text(graph)
    for _ in range(data.draw(st.integers(1, 4))):
        a = data.draw(st.integers(0, len(text)))
        b = data.draw(st.integers(a, min(len(text), a + 8)))
        insert = "".join(data.draw(st.lists(YAMLISH, max_size=4)))
        text = text[:a] + insert + text[b:]
    result = _roundtrip(text)
    assert result is None or (isinstance(result, Graph) and result.is_connected())


JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 700)
    | st.floats(allow_nan=True)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@SETTINGS
@given(graphs(), st.data())
def test_structural_corruptions_load_or_raise_graph_error(
    graph: Graph, data: st.DataObject
) -> None:
    doc = yaml.safe_load(_text(graph))
    kind = data.draw(st.sampled_from(["top", "node", "edge", "drop"]))
    must_fail = False  # an unknown key, a missing section: never silently accepted
    if kind == "top":
        key = data.draw(st.sampled_from(["name", "nodes", "edges", "extra"]))
        doc[key] = data.draw(JUNK)
        must_fail = key == "extra"
    elif kind == "node":
        node = data.draw(st.sampled_from(doc["nodes"]))
        key = data.draw(st.sampled_from(["id", "dim", "classes", "bogus"]))
        node[key] = data.draw(JUNK)
        must_fail = key == "bogus"
    elif kind == "edge":
        doc["edges"].append(data.draw(JUNK))
    else:
        must_fail = doc.pop(data.draw(st.sampled_from(["nodes", "edges"]))) is not None
    result = _roundtrip(yaml.safe_dump(doc))
    if must_fail:
        assert result is None, doc
    elif result is not None:  # whatever is accepted is a valid graph that saves as it loads
        assert result.is_connected()
        assert _roundtrip(_text(result)) == result
