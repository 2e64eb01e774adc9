"""``fedsheaf ufm``: user errors are one readable line; options of another mode are errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli


def test_config_error_names_the_file_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "quick.yaml"
    path.write_text("name: quickstart\n")
    assert cli.main(["ufm", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: {path}: unknown key 'name'"), err
    assert err.count(str(path)) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)  # a regression would block on the pipe
def test_an_unreadable_config_is_one_error_naming_it(tmp_path, capsys) -> None:
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("lam_H: 0.1  # \u00e9\n".encode("latin-1"))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # reading it would block
    for path, why in ((latin1, "not UTF-8 text"), (fifo, "not a regular file")):
        assert cli.main(["ufm", str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err == f"fedsheaf: error: cannot read UFM config {str(path)!r}: {why}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--mode", "exact", "--rho", "0.5"], "--rho applies only to --mode proximal"),
        (["--mode", "gd", "--rho", "0.5"], "--rho applies only to --mode proximal"),
        (["--lr", "0.5"], "--lr applies only to --mode gd, not to mode exact"),
        (["--mode", "joint", "--local-steps", "3"], "--local-steps applies only to --mode gd"),
    ],
)
def test_options_of_another_mode_are_errors(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["ufm", *argv, "--out", str(tmp_path / "out")]) == 2
    assert f"fedsheaf: error: ufm: option {words}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_option_out_of_range_is_named_as_typed(tmp_path, capsys) -> None:
    assert cli.main(["ufm", "--gamma", "2", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "fedsheaf: error: ufm: --gamma must be a finite number in [0, 1], got 2.0\n"
    )
    assert cli.main(["ufm", "--mode", "gd", "--local-steps", "0"]) == 2
    assert "ufm: --local-steps must be an integer >= 1, got 0" in capsys.readouterr().err


def test_a_diverging_descent_is_a_warning(tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    assert cli.main(["ufm", "--mode", "gd", "--lr", "30", "--out", out]) == 0
    err = capsys.readouterr().err
    assert err.startswith("ufm: warning: the iteration diverged (error to G_star ")
    assert err.endswith(": lower --lr or --local-steps\n")
    assert cli.main(["ufm", "--mode", "gd", "--lr", "1", "--out", out]) == 0
    assert "warning" not in capsys.readouterr().err


def test_help_describes_the_command_and_shows_defaults(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        cli.main(["ufm", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Simulate head-only FedAvg in the unconstrained-feature model" in out
    for text in (
        "communication rounds (default: 18)",
        "local behaviour of clients (default: exact)",
        "proximal weight, proximal mode (default: 0.001)",
        "(default: configs/ufm_fixed.yaml)",
        "output folder (default: runs/ufm)",
    ):
        assert text in out


FIXED = Path(__file__).resolve().parents[2] / "configs" / "ufm_fixed.yaml"


def test_the_config_is_positional_and_the_old_option_still_works(tmp_path, capsys) -> None:
    argv = ["--rounds", "2"]
    assert cli.main(["ufm", str(FIXED), *argv, "--out", str(tmp_path / "a")]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["ufm", "--config", str(FIXED), *argv, "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().err == (
        "fedsheaf ufm: warning: --config is deprecated; give the config first: "
        f"fedsheaf ufm {FIXED}\n"
    )
    first, second = (tmp_path / d / "ufm.json" for d in ("a", "b"))
    assert first.read_bytes() == second.read_bytes()
    assert cli.main(["ufm", str(FIXED), "--config", str(FIXED), "--out", str(tmp_path)]) == 2
    assert "ufm: the config is given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["ufm", "--help"])
    usage = capsys.readouterr().out
    assert "[CONFIG]" in usage and "--config" not in usage
