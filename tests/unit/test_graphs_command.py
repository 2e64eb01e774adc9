"""``fedsheaf graph build/show`` through configure()/run()."""

import argparse
import os
import re
from pathlib import Path

import pytest

from fedsheaf.cli import graph as graph_command
from fedsheaf.cli.main import main
from fedsheaf.config.presets import mnist15_graph, table3_pair_graph
from fedsheaf.graphs import Graph, load_graph
from fedsheaf.util.errors import ConfigError, GraphError

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
CONFIGS = GRAPHS.parent / "configs"


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
        (["build", "class-overlap", "--dims", "4,4", "--classes", "0,1;99"], "got 99"),
        (["build", "ring", "--dims", "4,4", "--classes", "0,-1;10"], "in 0..9 (the data"),
        (["build", "ring", "--dims", "4,4", "--name", "a/b"], "--name 'a/b' must be a plain"),
        (["build", "ring", "--dims", "4,4", "--name", ".."], "--name '..' must be a plain"),
        (["build", "ring", "--dims", "4,4", "--name", ""], "--name '' must be a plain"),
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
    out.write_text("name: pair\nnodes: [\n")  # a damaged graph file
    with pytest.raises(GraphError, match="exists and is a damaged or empty graph file.*--force"):
        cli("build", "pair", "--dim", "128", "--out", str(out))
    assert cli("build", "pair", "--dim", "128", "--out", str(out), "--force") == 0
    assert load_graph(out) == table3_pair_graph(128)
    config = tmp_path / "config.yaml"  # some other YAML file: never replaced
    config.write_text("name: quickstart\nagents: []\n")
    with pytest.raises(GraphError, match="keys name, agents, not a graph .*; .* another --out"):
        cli("build", "pair", "--dim", "128", "--out", str(config), "--force")
    assert config.read_text() == "name: quickstart\nagents: []\n"
    with pytest.raises(GraphError, match="is a directory; give the graph file's name"):
        cli("build", "pair", "--dim", "128", "--out", str(tmp_path), "--force")
    with pytest.raises(ConfigError, match=f"{config} is a file, not a directory"):
        cli("build", "pair", "--dim", "128", "--out", str(config / "pair.yaml"))


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("study.yaml", (CONFIGS / "pair_sweep.yaml").read_bytes(), "keys study, config,"),
        ("run.yaml", (CONFIGS / "quickstart.yaml").read_bytes(), "keys name, algorithm,"),
        ("notes.txt", b"remember the pair graph\n", "holds plain text, not a graph"),
        ("latin1.yaml", "name: caf\u00e9\nnodes: []\n".encode("latin-1"), "not UTF-8 text"),
        ("list.yaml", b"- [0, 1]\n", "holds a YAML list, not a graph"),
        ("notes.yaml", b"# only a comment\n", "holds comments only"),
        ("extra.yaml", b"nodes: []\nedges: []\nseed: 1\n", "keys nodes, edges, seed, not"),
        ("broken.yaml", b"agents: [\n", "neither valid YAML (line 2"),
        ("graph.txt", b"name: g\nnodes: [\n", "neither valid YAML"),  # a .txt: not a graph
    ],
)
def test_force_never_replaces_a_file_that_is_not_a_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, words: str
) -> None:
    out = tmp_path / name
    out.write_bytes(content)
    assert main(["graph", "build", "pair", "--dim", "64", "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: {out} exists and ") and err.count("\n") == 1, err
    assert words in err and "it will not be replaced, even with --force" in err, err
    assert out.read_bytes() == content
    assert sorted(tmp_path.iterdir()) == [out]  # no temporary file left either


@pytest.mark.timeout(60)  # a regression would block on the pipe
def test_force_does_not_open_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "g.yaml"
    os.mkfifo(fifo)  # reading it would block
    assert main(["graph", "build", "pair", "--dim", "64", "--out", str(fifo), "--force"]) == 2
    assert "exists and is not a regular file" in capsys.readouterr().err
    assert fifo.is_fifo()


def test_force_replaces_an_empty_file(tmp_path: Path) -> None:
    out = tmp_path / "g.yml"
    out.write_text("\n")
    with pytest.raises(GraphError, match="is a damaged or empty graph file"):
        cli("build", "pair", "--dim", "64", "--out", str(out))
    assert cli("build", "pair", "--dim", "64", "--out", str(out), "--force") == 0
    assert load_graph(out) == table3_pair_graph(64)


def test_a_name_with_a_path_separator_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["graph", "build", "ring", "--dims", "4,4", "--name", "a/b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsheaf: error: --name 'a/b' must be a plain name") and (
        err.count("\n") == 1
    )
    assert list(tmp_path.iterdir()) == []


def test_class_ids_outside_the_data_sets_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.yaml"
    argv = ["graph", "build", "class-overlap", "--dims", "4,4", "--out", str(out)]
    assert main([*argv, "--classes", "0,1;99"]) == 2
    assert capsys.readouterr().err == (
        "fedsheaf: error: --classes '0,1;99': class ids must be in 0..9 "
        "(the data sets have 10 classes); got 99\n"
    )
    assert not out.exists()
    assert main([*argv, "--classes", "0,1;"]) == 2
    assert capsys.readouterr().err == (
        "fedsheaf: error: --classes '0,1;': node 1 has no classes (each node needs at least "
        "one, as each agent does)\n"
    )
    assert not out.exists()
    assert main([*argv, "--classes", "0,1;9"]) == 0
    assert load_graph(out).classes == ((0, 1), (9,))


def test_cli_help_describes_graph(capsys: pytest.CaptureFixture[str]) -> None:
    from fedsheaf.cli import main as main_cli

    with pytest.raises(SystemExit):
        main_cli.main(["graph", "--help"])
    assert "Build graph files" in capsys.readouterr().out
