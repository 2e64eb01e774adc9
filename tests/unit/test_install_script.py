"""run/install.sh keeps a venv's extras: run/test.sh and run/bench.sh call it with none, and
must not add the PyPI Open MPI to a cluster venv built against the site MPI. run/test.sh
runs pytest in the workers it is told.

The script runs on a copy of the repository's files with a stand-in interpreter in
``.venv/bin/python`` that records what pip was asked to install (no download here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAND_IN = """#!/bin/sh
# records `-m pip install ... -e .[extras]`; every import check succeeds unless the file
# broken says why it fails (as an exception's last line); the script's
# probe for a site-MPI venv (python - on stdin) answers as the file site-mpi says
here=$(dirname "$0")/..
case "$*" in
  -c*) [ -e "$here/broken" ] || exit 0  # an install pip could not finish
       echo "Traceback (most recent call last):" >&2; cat "$here/broken" >&2; exit 1 ;;
  *"pip install"*"-e"*) echo "$*" >> "$here/pip.log" ;;
  *"pip install"*) echo "$*" >> "$here/pip.log" ;;
  *"-m pytest"*) echo "$*" >> "$here/pytest.log" ;;
  -) cat > /dev/null; [ -e "$here/site-mpi" ]; exit ;;
esac
exit 0
"""


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "run").mkdir(parents=True)
    shutil.copy2(REPO / "run" / "install.sh", root / "run" / "install.sh")
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy2(REPO / name, root / name)
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return root


def _install(root: Path, **env: str) -> list[str]:
    full = {k: v for k, v in os.environ.items() if k != "FEDSHEAF_EXTRAS"}
    full.update(env)
    proc = subprocess.run(
        ["bash", str(root / "run" / "install.sh")], env=full, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    log = root / ".venv" / "pip.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [c.split("-e ", 1)[1] for c in calls if "-e " in c]


def test_the_extras_of_the_first_install_are_kept(tmp_path):
    root = _checkout(tmp_path)
    assert _install(root, FEDSHEAF_EXTRAS="test") == [".[test]"]  # a cluster venv
    assert _install(root) == []  # installed: nothing to do
    with open(root / "setup.cfg", "a") as fh:
        fh.write("\n# a changed dependency list: install again\n")
    assert _install(root) == [".[test]"]  # not .[test,mpi-wheel]
    assert (root / ".venv" / ".fedsheaf-extras").read_text() == "test\n"


def test_a_fresh_venv_gets_the_mpi_wheel_and_an_explicit_choice_wins(tmp_path):
    root = _checkout(tmp_path)
    assert _install(root) == [".[test,mpi-wheel]"]
    assert _install(root, FEDSHEAF_EXTRAS="test") == [".[test]"]
    with open(root / "setup.cfg", "a") as fh:
        fh.write("\n# changed\n")
    assert _install(root) == [".[test]"]


def test_a_venv_built_against_a_site_mpi_without_the_script_keeps_it(tmp_path):
    """The README's cluster recipe installs by hand: an mpi4py, no Open MPI wheel, no
    record of extras. run/test.sh must not add the wheel to it."""
    root = _checkout(tmp_path)
    (root / ".venv" / "site-mpi").touch()
    assert _install(root) == [".[test]"]
    (root / ".venv" / "site-mpi").unlink()  # the record now decides
    with open(root / "setup.cfg", "a") as fh:
        fh.write("\n# changed\n")
    assert _install(root) == [".[test]"]


def test_a_failed_install_says_the_exception_and_the_free_space(tmp_path):
    """The commonest cause of a failed install is a full disk: the script says how much
    room the venv's disk and the temporary folder have, and the import's exception
    without its traceback."""
    root = _checkout(tmp_path)
    error = "OSError: libtorch_global_deps.so: cannot open shared object file"
    (root / ".venv" / "broken").write_text(error + "\n")
    env = {k: v for k, v in os.environ.items() if k != "FEDSHEAF_EXTRAS"}
    proc = subprocess.run(
        ["bash", str(root / "run" / "install.sh")],
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    said = proc.stderr.splitlines()
    assert said[1:3] == [error, "fedsheaf: installation into .venv failed (see pip output above)"]
    assert "Traceback" not in proc.stderr
    free = [line for line in said if " GB free on the disk of " in line]
    assert [line.rsplit(" ", 1)[1] for line in free] == [".venv", str(tmp_path)], said
    assert "FEDSHEAF_TORCH_INDEX" in said[-1]
    assert not list((root / ".venv").glob(".fedsheaf-installed-*"))  # installs again next time


def test_the_suite_runs_in_two_workers_unless_told_otherwise(tmp_path):
    root = _checkout(tmp_path)
    shutil.copy2(REPO / "run" / "test.sh", root / "run" / "test.sh")
    for tool in ("ruff", "mypy"):  # the lint steps: stand-ins that pass
        stub = root / ".venv" / "bin" / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "FEDSHEAF_TEST_WORKERS"}

    def test_sh(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(root / "run" / "test.sh"), *args]
        return subprocess.run(cmd, env={**env, **extra}, capture_output=True, text=True)

    assert test_sh("-x").returncode == 0
    assert test_sh(FEDSHEAF_TEST_WORKERS="0").returncode == 0
    calls = (root / ".venv" / "pytest.log").read_text().splitlines()
    assert calls[0].endswith("-n 2 --dist loadscope -x") and "-n 0 " in calls[1]
    bad = test_sh(FEDSHEAF_TEST_WORKERS="two")  # refused before anything runs
    assert bad.returncode == 2
    assert (root / ".venv" / "pytest.log").read_text().splitlines() == calls
    assert bad.stderr == "fedsheaf: FEDSHEAF_TEST_WORKERS must be a whole number, got 'two'\n"


#: A stand-in for the interpreter the venv is made with (FEDSHEAF_PYTHON): its ``-c`` probe
#: finds a torch where the file has-torch lies beside it (a site or conda torch; one in a
#: virtual environment where the file is not empty), printing what it found; ``-m venv
#: ARGS DIR`` records ARGS and makes DIR with the stand-in above.
BASE = """#!/bin/sh
here=$(dirname "$0")
case "$1" in
  -c) [ -e "$here/has-torch" ] || exit 1; echo "torch 2.0.0+cpu (CPU-only)"
      [ -s "$here/has-torch" ] && exit 3; exit 0 ;;  # has-torch not empty: a venv's torch
  -m) [ "$2" = venv ] || exit 1; shift 2; echo "$*" >> "$here/venv.log"
      for dir; do :; done
      mkdir -p "$dir/bin"; cp "$here/stand-in" "$dir/bin/python"; chmod +x "$dir/bin/python"
      exit 0 ;;
esac
exit 1
"""


def _fresh_checkout(tmp_path: Path, has_torch: bool) -> tuple[Path, Path]:
    """A checkout without .venv, and a stand-in base interpreter (FEDSHEAF_PYTHON)."""
    root = _checkout(tmp_path)
    shutil.rmtree(root / ".venv")
    base = tmp_path / "base"
    base.mkdir()
    (base / "stand-in").write_text(STAND_IN)
    (base / "python").write_text(BASE)
    (base / "python").chmod(0o755)
    if has_torch:
        (base / "has-torch").touch()
    return root, base / "python"


def _install_run(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FEDSHEAF_")}
    full.update(env)
    proc = subprocess.run(
        ["bash", str(root / "run" / "install.sh")], env=full, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_torch_the_interpreter_has_is_reused_not_pulled_again(tmp_path):
    root, python = _fresh_checkout(tmp_path, has_torch=True)
    proc = _install_run(root, FEDSHEAF_PYTHON=str(python))
    assert (python.parent / "venv.log").read_text().split() == ["--system-site-packages", ".venv"]
    assert "torch 2.0.0+cpu (CPU-only)" in proc.stderr
    assert "--system-site-packages" in proc.stderr
    pip = (root / ".venv" / "pip.log").read_text()
    assert "--index-url" not in pip and "-e .[test,mpi-wheel]" in pip
    # without a torch there, the venv is its own
    root, python = _fresh_checkout(tmp_path / "no-torch", has_torch=False)
    proc = _install_run(root, FEDSHEAF_PYTHON=str(python))
    assert (python.parent / "venv.log").read_text().split() == [".venv"]
    assert "--system-site-packages" not in proc.stderr


def test_a_torch_in_another_venv_cannot_be_shared_and_says_so(tmp_path):
    """A venv made from a venv's interpreter sees the base installation, not that venv's
    packages: --system-site-packages would not give it the torch."""
    root, python = _fresh_checkout(tmp_path, has_torch=True)
    (python.parent / "has-torch").write_text("in a venv\n")
    proc = _install_run(root, FEDSHEAF_PYTHON=str(python))
    assert (python.parent / "venv.log").read_text().split() == [".venv"]
    assert "cannot be shared" in proc.stderr and "install fedsheaf into that" in proc.stderr


def test_a_torch_index_installs_torch_from_it_first(tmp_path):
    """FEDSHEAF_TORCH_INDEX: torch and torchvision from that index (the CPU-only one),
    before fedsheaf; a torch the interpreter has is then not reused."""
    root, python = _fresh_checkout(tmp_path, has_torch=True)
    index = str(tmp_path / "an-index")
    _install_run(root, FEDSHEAF_PYTHON=str(python), FEDSHEAF_TORCH_INDEX=index)
    assert (python.parent / "venv.log").read_text().split() == [".venv"]
    calls = (root / ".venv" / "pip.log").read_text().splitlines()
    torch_at = next(i for i, c in enumerate(calls) if f"--index-url {index}" in c)
    assert calls[torch_at].split()[-2:] == ["torch", "torchvision"]
    assert torch_at < next(i for i, c in enumerate(calls) if "-e .[" in c)
