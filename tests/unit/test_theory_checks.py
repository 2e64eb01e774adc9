"""The theory commands' argument checks: the range in a message is the range allowed."""

import math

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.theory.checks import check_int, check_real
from fedsheaf.util.errors import ConfigError


def test_ranges_read_as_what_they_allow():
    with pytest.raises(ConfigError, match=r"^x must be a finite number in \(0, 1\], got 0$"):
        check_real("x", 0, 0, 1, strict=True)
    with pytest.raises(ConfigError, match=r"^x must be a finite number in \[0, inf\), got inf$"):
        check_real("x", math.inf, 0)
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 1, got True$"):
        check_int("n", True, 1)
    check_real("x", 1, 0, 1, strict=True)
    check_int("n", 3, 1)


def test_the_commands_say_so(capsys):
    assert cli.main(["fedrep-linear", "--participation", "0"]) == 2
    assert "participation must be a finite number in (0, 1], got 0.0" in capsys.readouterr().err
    assert cli.main(["ufm", "--rho", "inf"]) == 2
    assert "ufm: --rho must be a finite number in [0, inf), got inf" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["ufm", "fedrep-linear"])
def test_an_unusable_out_fails_before_any_work(command, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert cli.main([command, "--out", str(tmp_path / "file" / "x")]) == 2
    captured = capsys.readouterr()
    assert f"--out {tmp_path / 'file' / 'x'} cannot be created: Not a directory" in captured.err
    assert captured.out == ""  # nothing was simulated (its table is not printed)
