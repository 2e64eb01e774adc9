"""The presets travel with the package: a plain (non-editable) wheel, installed into a
fresh virtual environment, runs ``fedsheaf run quickstart`` from an empty directory and
``fedsheaf init DIR`` copies configs/, graphs/ and slurm/.

The wheel is built from a copy of the checkout (the checkout is left as found) with the
setuptools of this environment (no download). The fresh environment gets the wheel alone
(``--no-deps``); torch, mpi4py and the rest come from this environment's site-packages,
listed in a ``.pth`` file after the install (torch's CUDA build is ~5 GB: not copied).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import MPIEXEC, mpi_env

REPO = Path(__file__).resolve().parents[2]
#: What a build reads: the package, its build files and the folders it ships as presets.
BUILD_INPUTS = ("fedsheaf", "configs", "graphs", "slurm")
BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in")

pytestmark = pytest.mark.mpi


def _run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel installed; returns its bin/ folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "_presets")
    for name in BUILD_INPUTS:
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in BUILD_FILES:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, src / name)
    try:
        import setuptools  # noqa: F401  (--no-build-isolation builds with this one)
    except ImportError:
        pytest.skip("no setuptools in this environment to build the wheel with")
    pip = [sys.executable, "-m", "pip"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist")]
    _run([*build, "."], cwd=src)
    wheel = next((tmp / "dist").glob("fedsheaf-*.whl"))
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([*pip, "--python", str(python), "install", "-q", "--no-deps", str(wheel)])
    # this environment's packages (torch, mpi4py, ...) after the venv's own, where the
    # wheel's fedsheaf is: a path in a .pth file is appended to sys.path
    purelib = _run([str(python), "-c", PURELIB]).stdout.strip()
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    Path(purelib, "zz-fedsheaf-test-deps.pth").write_text("\n".join(ours) + "\n")
    return venv / "bin"


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def _env() -> dict[str, str]:
    env = mpi_env()
    env.pop("PYTHONPATH", None)
    return env


def test_the_wheel_holds_the_presets_and_runs_the_quickstart_from_anywhere(installed, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    where = _run(
        [str(installed / "python"), "-c", "import fedsheaf, sys; print(fedsheaf.__file__)"],
        cwd=empty,
        env=_env(),
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.parent), where  # the wheel's, not the checkout's
    presets = Path(where).parent / "_presets"
    for name in ("configs", "graphs", "slurm"):
        shipped = sorted(p.name for p in (REPO / name).iterdir() if p.is_file())
        assert sorted(p.name for p in (presets / name).iterdir()) == shipped

    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    runs = tmp_path / "runs"
    cmd = [str(MPIEXEC), "--oversubscribe", "-n", "4", str(installed / "fedsheaf"), "run"]
    cmd += ["quickstart", "train.epochs=1", f"output.dir={runs}"]
    proc = subprocess.run(cmd, cwd=empty, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = runs / "quickstart-sheaf_frl-seed0"
    assert json.loads((run_dir / "summary.json").read_text())  # the run finished
    assert list(empty.iterdir()) == []  # nothing written where it was started
    config = (run_dir / "config.yaml").read_text()
    assert str(presets / "graphs" / "quick4.yaml") in config

    proc = _run([str(installed / "fedsheaf"), "init", "proj"], cwd=tmp_path, env=_env())
    for name in ("configs", "graphs", "slurm"):
        assert sorted(os.listdir(tmp_path / "proj" / name)) == sorted(
            p.name for p in (REPO / name).iterdir() if p.is_file()
        )
