"""The command line: every subcommand parses; a command imports only its own module."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedsheaf import cli
from tests.conftest import REPO

HEAVY = ("fedsheaf.report", "fedsheaf.bench.command", "fedsheaf.theory.command", "matplotlib")


def test_run_imports_none_of_the_other_commands():
    code = (
        "import sys; from fedsheaf import cli; cli.build_parser('run'); "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


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
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_a_full_parser_still_builds():
    parser = cli.build_parser()
    args = parser.parse_args(["graph", "show", "graphs/quick4.yaml"])
    assert args.func is not None


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
