"""``fedsheaf graph build/show`` through configure()/run()."""

import argparse
import re
from pathlib import Path

import pytest

from fedsheaf import graph_command
from fedsheaf.errors import GraphError
from fedsheaf.graphs import Graph, load_graph
from fedsheaf.presets import mnist15_graph, table3_pair_graph

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="fedsheaf graph")
    graph_command.configure(parser)
    return graph_command.run(parser.parse_args(list(argv)))


def test_mnist15_file_equals_fresh_build(tmp_path: Path) -> None:
    committed = GRAPHS / "mnist15.yaml"
    assert load_graph(committed) == mnist15_graph(0.4)
    out = tmp_path / "mnist15.yaml"
    assert cli("build", "mnist15", "--out", str(out)) == 0
    assert out.read_text() == committed.read_text()


def test_pair_file_equals_fresh_build(tmp_path: Path) -> None:
    committed = GRAPHS / "pair.yaml"
    assert load_graph(committed) == table3_pair_graph(128)
    out = tmp_path / "pair.yaml"
    assert cli("build", "pair", "--dim", "128", "--out", str(out)) == 0
    assert out.read_text() == committed.read_text()


def test_quick4_file_is_rebuilt_by_its_recorded_command(tmp_path: Path) -> None:
    committed = GRAPHS / "quick4.yaml"
    first = committed.read_text().splitlines()[0]
    assert first.startswith("# built by: fedsheaf graph build class-overlap")
    out = tmp_path / "q.yaml"
    argv = [
        "build",
        "class-overlap",
        "--name",
        "quick4",
        "--dims",
        "16,24,32,24",
        "--density",
        "1.0",
        "--classes",
        "0,1,2,3,4;3,4,5,6,7;5,6,7,8,9;0,1,8,9,2",
        "--out",
        str(out),
    ]
    assert cli(*argv) == 0
    assert out.read_text() == committed.read_text()


def test_default_output_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("build", "ring", "--dims", "4,5,6") == 0
    assert load_graph(tmp_path / "graphs" / "ring.yaml").edges == ((0, 1), (0, 2), (1, 2))


def test_build_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(tmp_path / "g.yaml")  # rebuilt in place: --force from the second build on
    cli("build", "class-overlap", "--classes", "0,1,2;2,3;0,3", "--dims", "16,32,16", "--out", f)
    g = load_graph(f)
    assert g.classes == ((0, 1, 2), (2, 3), (0, 3)) and g.dims == (16, 32, 16)
    assert "wrote" in capsys.readouterr().out
    cli("build", "complete", "--dims", "1,2,3,4", "--out", f, "--force")
    assert len(load_graph(f).edges) == 6
    cli(
        "build",
        "erdos-renyi",
        "--dims",
        "8,8,8,8,8",
        "--p",
        "0.5",
        "--seed",
        "3",
        "--out",
        f,
        "--force",
    )
    a = load_graph(f)
    cli("build", "erdos-renyi", "--dims", "8,8,8,8,8", "--p", "0.5", "--seed", "3", "--out", f)
    assert load_graph(f) == a and a.is_connected()
    cli("build", "pair", "--dims", "64,128", "--name", "p2", "--out", f, "--force")
    assert load_graph(f) == Graph("p2", (64, 128), ((0, 1),))
    cli("build", "ring", "--dims", "3,3,3", "--classes", "0;1;2", "--out", f, "--force")
    assert load_graph(f).classes == ((0,), (1,), (2,))
    capsys.readouterr()
    cli("build", "ring", "--dims", "8", "--out", f, "--force")  # one agent: a ring of one
    assert capsys.readouterr().out == f"wrote {f}: 1 node, 0 edges, density 1.000\n"


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("show", str(GRAPHS / "quick4.yaml")) == 0
    out = capsys.readouterr().out
    assert "4 nodes, 6 edges, density 1.000, connected" in out
    assert "1 <- 3" in out and "tie: smaller id is head" in out
    assert "2 <- 0" in out and "(d 32 <- 16)" in out
    lines = out.splitlines()
    header = next(k for k, line in enumerate(lines) if line.lstrip().startswith("node"))
    assert lines[header + 3].split()[:3] == ["2", "32", "3"]  # node, dim, degree


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["build", "ring", "--dims", "4,4", "--p", "0.3"], "--p does not apply to ring"),
        (["build", "mnist15", "--dims", "4,4"], "--dims does not apply to mnist15"),
        (["build", "ring"], "--dims is required"),
        (["build", "ring", "--dims", "4,x"], "not a comma-separated list of integers"),
        (["build", "ring", "--dims", "4,0"], "positive integers"),
        (["build", "class-overlap", "--dims", "4,4"], "--classes is required"),
        (["build", "class-overlap", "--dims", "4,4", "--classes", "1"], "1 class sets"),
        (["build", "erdos-renyi", "--dims", "4,4"], "--p is required"),
        (["build", "pair", "--dim", "100"], "Table 3 has no latent dimension"),
        (["build", "pair", "--dim", "16", "--dims", "4,4"], "not both"),
        (["build", "pair", "--dims", "4,4,4"], "exactly 2 dims"),
        (["build", "pair"], "graph build pair: give --dim D (the Table-3 pair) or --dims D0,D1"),
        (["build", "mnist15", "--density", "2"], "density must be in"),
        (["show", "/nonexistent/graph.yaml"], "does not exist"),
    ],
)
def test_user_errors(tmp_path: Path, argv: list[str], words: str) -> None:
    if argv[0] == "build":
        argv = [*argv, "--out", str(tmp_path / "x.yaml")]
    with pytest.raises(GraphError, match=re.escape(words)):
        cli(*argv)
    assert not (tmp_path / "x.yaml").exists()


def test_unknown_kind_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit):
        cli("build", "torus")


def test_an_existing_different_file_is_kept_unless_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pair.yaml"
    assert cli("build", "pair", "--dim", "64", "--out", str(out)) == 0
    first = out.read_text()
    assert cli("build", "pair", "--dim", "64", "--out", str(out)) == 0  # same graph: no-op
    assert "already holds this graph; left unchanged" in capsys.readouterr().out
    with pytest.raises(GraphError, match="exists and holds a different graph.*--force"):
        cli("build", "pair", "--dim", "128", "--out", str(out))
    assert out.read_text() == first
    out.write_text("not a graph: [\n")
    with pytest.raises(GraphError, match="exists and holds a different graph"):
        cli("build", "pair", "--dim", "128", "--out", str(out))
    assert cli("build", "pair", "--dim", "128", "--out", str(out), "--force") == 0
    assert load_graph(out) == table3_pair_graph(128)
    config = tmp_path / "config.yaml"  # some other YAML file: never replaced
    config.write_text("name: quickstart\nagents: []\n")
    with pytest.raises(GraphError, match="holds a run config, not a graph; .* another --out"):
        cli("build", "pair", "--dim", "128", "--out", str(config), "--force")
    assert config.read_text() == "name: quickstart\nagents: []\n"
    with pytest.raises(GraphError, match="is a directory; give the graph file's name"):
        cli("build", "pair", "--dim", "128", "--out", str(tmp_path), "--force")


def test_cli_help_describes_graph(capsys: pytest.CaptureFixture[str]) -> None:
    from fedsheaf import cli as main_cli

    with pytest.raises(SystemExit):
        main_cli.main(["graph", "--help"])
    assert "Build graph files" in capsys.readouterr().out
