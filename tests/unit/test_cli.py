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
