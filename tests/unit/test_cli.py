"""The command line: every subcommand parses; a command imports only its own module."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys

import pytest

import fedsheaf
from fedsheaf.cli import main as cli
from fedsheaf.cli.main import options_first
from tests.conftest import REPO

QUICK = "configs/quickstart.yaml"
HEAVY = (
    "fedsheaf.ops.report",
    "fedsheaf.ops.bench.driver",
    "fedsheaf.cli.report",
    "fedsheaf.cli.bench",
    "fedsheaf.cli.ufm",
    "matplotlib",
)


def test_run_imports_none_of_the_other_commands():
    code = (
        "import sys; from fedsheaf.cli import main as cli; cli.build_parser('run'); "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_version_prints_the_packages_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"fedsheaf {fedsheaf.__version__}\n"
    assert fedsheaf.__version__ == importlib.metadata.version("fedsheaf")  # what pip says


@pytest.mark.parametrize("name", ["run", *(entry[0] for entry in cli.SUBCOMMANDS)])
def test_every_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    assert f"usage: fedsheaf {name}" in capsys.readouterr().out


def test_top_level_help_lists_every_command_and_unknown_ones_fail(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    listing = capsys.readouterr().out
    assert all(entry[0] in listing for entry in cli.SUBCOMMANDS)
    with pytest.raises(SystemExit) as done:
        cli.main(["bogus"])
    assert done.value.code == 2
    assert "fedsheaf: error: unknown command 'bogus'; the commands: run, check," in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["runn"], "fedsheaf: error: unknown command 'runn' (did you mean 'run'?)"),
        (["check", "x.yaml", "--zzz"], "fedsheaf check: error: unrecognized arguments: --zzz"),
        (["report"], "fedsheaf report: error: the following arguments are required: paths"),
        (["graph", "build"], "fedsheaf graph build: error: the following arguments"),
        (["run", "--resume"], "fedsheaf run: error: argument --resume: expected one argument"),
        # no abbreviated options: argparse would take these for --local and --resume
        (["sweep", "s.yaml", "--loca"], "fedsheaf sweep: error: unrecognized arguments: --loca"),
        (["check", "--resum", "r"], "fedsheaf check: error: unrecognized arguments: --resum"),
        (["graph", "build", "ring", "--nam", "x"], "fedsheaf graph build: error: unrecognized"),
    ],
)
def test_argument_errors_are_one_line_naming_the_command(argv, said, capsys):
    """argparse would print its usage first, and an unknown option after a subcommand under
    the top level's usage (``fedsheaf [-h] [--version] COMMAND ...``)."""
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and err.startswith(said), err
    command = said.split(": error")[0]
    assert err.endswith(f"`{command} --help` says more\n"), err


def test_a_full_parser_still_builds(capsys):
    """Built for no command in particular, the parser configures every subcommand."""
    parser = cli.build_parser()
    args = parser.parse_args(["graph", "show", "graphs/quick4.yaml"])
    assert args.func is importlib.import_module("fedsheaf.cli.graph").run
    for name, *_ in cli.SUBCOMMANDS:
        with pytest.raises(SystemExit) as done:
            parser.parse_args([name, "--help"])
        assert done.value.code == 0
        usage = capsys.readouterr().out.splitlines()[0]
        assert usage.startswith(f"usage: fedsheaf {name} [-h]") and usage.strip() != (
            f"usage: fedsheaf {name} [-h]"
        ), usage  # its own arguments were added, not just its name


def test_launched_rank_reads_the_launchers_variables(monkeypatch):
    for name in cli.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert cli.launched_rank() == 0
    monkeypatch.setenv("SLURM_PROCID", "5")
    assert cli.launched_rank() == 5
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")  # the MPI launcher's word comes first
    assert cli.launched_rank() == 2


@pytest.mark.parametrize(("rank", "printed"), [("0", True), ("3", False)])
def test_only_the_first_rank_prints_argument_errors(monkeypatch, capsys, rank, printed):
    for name in cli.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", rank)
    monkeypatch.setattr(cli, "QUIET_RANK_GRACE", 0.0)  # alone, no rank 0 to wait for
    for argv in (["run", "--bogus", "x.yaml"], ["run", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr()
        assert bool(out.out + out.err) == printed, argv


def test_an_unwritable_output_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    code = cli.main(["graph", "build", "ring", "--dims", "16,32", "--out", f"{blocker}/g.yaml"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("fedsheaf: error: ") and str(blocker) in err


def test_run_takes_resume_anywhere_and_hints_at_overrides(capsys):
    assert options_first(["run", "c.yaml", "--resume", "D", "a=1"]) == [
        "run", "--resume", "D", "c.yaml", "a=1",
    ]  # fmt: skip
    assert options_first(["run", "a=1", "--resume=D", "b=2"]) == ["run", "--resume=D", "a=1", "b=2"]
    assert options_first(["sweep", "s.yaml", "--local"]) == ["sweep", "s.yaml", "--local"]
    # the override after --resume is not "unrecognized" (fedsheaf run then says "not both")
    argv = options_first(["run", "configs/quickstart.yaml", "--resume", "/nowhere", "seed=1"])
    args = cli.build_parser("run").parse_args(argv)
    assert (args.config, args.resume, args.overrides) == (QUICK, "/nowhere", ["seed=1"])
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "configs/quickstart.yaml", "--epochs", "3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --epochs 3 (fedsheaf run takes config overrides as" in err
    assert "e.g. train.epochs=3" in err


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    study = {  # a plan of 600 lines, well over what a pipe buffers
        "study": "many",
        "config": str(REPO / "configs/quickstart.yaml"),
        "output": str(tmp_path / "sweep"),  # not runs/many in the checkout
        "seeds": list(range(600)),
        "axis": {"name": "s", "key": "data.shift", "values": [0.5]},
        "methods": [{"name": "sf"}],
    }
    (tmp_path / "study.yaml").write_text(json.dumps(study))  # JSON is YAML
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedsheaf", "sweep", str(tmp_path / "study.yaml")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1 and err == "", err
