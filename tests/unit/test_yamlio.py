"""Strict YAML: a key given twice is an error; anchors give independent copies; plain
numbers and booleans as YAML 1.2 reads them."""

import os
from pathlib import Path

import pytest
import yaml

from fedsheaf.config.sections import load_config, parse_override, read_yaml
from fedsheaf.graphs import load_graph
from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError, GraphError

REPO = Path(__file__).resolve().parents[2]


def test_a_key_given_twice_is_an_error_naming_it_and_both_lines():
    with pytest.raises(yaml.YAMLError) as err:
        yamlio.load("train: {lr: 0.05}\nseed: 1\ntrain: {epochs: 7}\n")
    assert yamlio.problem(err.value) == (
        "line 3, column 1: while reading a mapping; found the key 'train' twice "
        "(the first at line 1)"
    )
    with pytest.raises(yaml.YAMLError, match="found the key 'b' twice"):
        yamlio.load("a:\n  - {b: 1, b: 2}\n")  # at any depth
    # merged keys may be overridden: that is what a merge is for
    assert yamlio.load("x: &x {k: 1, m: 2}\ny: {<<: *x, k: 3}\n") == {
        "x": {"k": 1, "m": 2},
        "y": {"k": 3, "m": 2},
    }
    assert yamlio.load("") is None and yamlio.load("# nothing\n") is None


def test_one_key_spelled_two_ways_is_given_twice():
    """Keys are compared as the mapping would hold them, not by their text."""
    for text, spelled in (
        ("True: 1\ntrue: 2\n", "'true' twice (the first at line 1, as 'True')"),
        ("1: a\n01: b\n", "'01' twice (the first at line 1, as '1')"),
        ("null: 1\n~: 2\n", "'~' twice (the first at line 1, as 'null')"),
    ):
        with pytest.raises(yaml.YAMLError) as err:
            yamlio.load(text)
        assert yamlio.problem(err.value).endswith(spelled)
    # the same text under different tags is two keys, as it is to yaml.safe_load
    assert yamlio.load("'1': a\n1: b\n") == {"1": "a", 1: "b"}
    # a key PyYAML builds only inside a mapping ("=", the value key) loads as before
    assert yamlio.load("=: 1\n") == yaml.safe_load("=: 1\n") == {"=": 1}


def test_anchors_give_independent_copies():
    doc = yamlio.load("a: &v {k: [1, 2]}\nb: *v\nc: {<<: *v}\n")
    assert doc["a"] == doc["b"] == doc["c"] == {"k": [1, 2]}
    doc["b"]["k"][0] = 9
    doc["c"]["k"].append(3)
    assert doc["a"] == {"k": [1, 2]} and doc["b"] == {"k": [9, 2]} and doc["c"] == {"k": [1, 2, 3]}


def test_bad_values_and_self_reference_are_reported_not_raised_raw():
    for text, words in (
        ("s: 2020-13-01\n", "bad value (month must be in 1..12)"),
        ("v: !!float abc\n", "bad value (could not convert string to float: 'abc')"),
    ):
        with pytest.raises(yamlio.BAD_VALUE) as err:
            yamlio.load(text)
        assert yamlio.problem(err.value) == words
    with pytest.raises(RecursionError) as rec:
        yamlio.load("&a [*a]\n")
    assert "refers to itself" in yamlio.problem(rec.value)


def test_an_override_of_one_agent_leaves_agents_sharing_its_anchor_alone(tmp_path):
    path = tmp_path / "anchor.yaml"
    path.write_text(
        f"name: a\ngraph: {REPO / 'graphs/quickstart.yaml'}\nagents:\n"
        "  - &a {encoder: [8, 16], head: [16], classes: [0, 1, 2]}\n"
        "  - {<<: *a, encoder: [12, 24]}\n  - *a\n  - *a\n"
    )
    cfg = load_config(path, ["agents[1].lr=0.5", "agents[2].classes[0]=9"])
    assert [a.lr for a in cfg.agents] == [None, 0.5, None, None]
    assert [a.classes for a in cfg.agents] == [[0, 1, 2], [0, 1, 2], [9, 1, 2], [0, 1, 2]]
    assert [a.encoder for a in cfg.agents] == [[8, 16], [12, 24], [8, 16], [8, 16]]


def test_configs_studies_and_graphs_refuse_keys_given_twice(tmp_path):
    config = tmp_path / "dup.yaml"
    config.write_text((REPO / "configs/quickstart.yaml").read_text() + "train: {epochs: 7}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml is not valid YAML: line \d+, .*'train' twice"):
        load_config(config)
    graph = tmp_path / "g.yaml"
    graph.write_text("name: g\nnodes: [{dim: 2}, {dim: 2}]\nedges: [[0, 1]]\nedges: []\n")
    with pytest.raises(GraphError, match="is not valid YAML .*'edges' twice"):
        load_graph(graph)
    with pytest.raises(ConfigError, match="override 'seed=2020-13-01': cannot parse value: bad"):
        parse_override("seed=2020-13-01")
    with pytest.raises(ConfigError, match="config file .* is a directory, not a file"):
        read_yaml(tmp_path)


def test_a_graph_path_that_is_not_a_regular_file_is_refused_not_read(tmp_path):
    fifo = tmp_path / "g.yaml"
    os.mkfifo(fifo)  # reading it would block until a writer came
    with pytest.raises(GraphError, match="is not a regular file"):
        load_graph(fifo)


@pytest.mark.parametrize(
    "text,value",
    [
        ("010", 10),  # YAML 1.1: octal 8
        ("007", 7),
        ("-3", -3),
        ("1e-3", 0.001),
        ("1e3", 1000.0),  # YAML 1.1: the string '1e3'
        ("5.", 5.0),
        (".5", 0.5),
        ("-.inf", float("-inf")),
        ("true", True),
        ("False", False),
        ("1:00", "1:00"),  # YAML 1.1: base 60, i.e. 60
        ("0x10", "0x10"),  # YAML 1.1: 16
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("on", "on"),  # YAML 1.1: true
        ("no", "no"),  # YAML 1.1: false
    ],
)
def test_plain_numbers_and_booleans_are_read_as_typed(text, value):
    for got in (yamlio.load(f"v: {text}\n")["v"], parse_override(f"train.x={text}")[1]):
        assert got == value and type(got) is type(value)  # 10, not 10.0; True, not 1
    # and written back so that they read back the same (strings quoted where needed)
    doc = {"v": value, "s": text}
    assert yamlio.load(yamlio.dump(doc)) == doc


def test_strings_that_look_like_numbers_survive_a_run_directory(tmp_path):
    """config.yaml is written by dump_config and read again on resume."""
    from fedsheaf.config.sections import dump_config
    from fedsheaf.rundir.resume import load_run_config

    cfg = load_config(REPO / "configs/quickstart.yaml", ["name='1e3'", "output.name='08'"])
    assert (cfg.name, cfg.output.name) == ("1e3", "08")
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    again = load_run_config(tmp_path / "config.yaml")
    assert (again.name, again.output.name) == ("1e3", "08") and again == cfg


def test_a_number_yaml_1_1_would_rewrite_is_refused_by_the_schema():
    for override, words in (
        ("train.epochs=1:00", "config key 'train.epochs' must be an integer, got '1:00'"),
        ("seed=0x10", "config key 'seed' must be an integer, got '0x10'"),
        ("train.lr=1_0", "config key 'train.lr' must be a number, got '1_0'"),
        ("data.download=yes", "config key 'data.download' must be true/false, got 'yes'"),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(REPO / "configs/quickstart.yaml", [override])
        assert str(err.value) == f"override '{override}': {words}"
    assert load_config(REPO / "configs/quickstart.yaml", ["seed=010"]).seed == 10
