"""Shared test helpers: repo paths, the shared data root, and an mpiexec launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fedsheaf.hostinfo import find_mpiexec

REPO = Path(__file__).resolve().parents[1]
#: The mpiexec `fedsheaf sweep`/`bench` would start (FEDSHEAF_MPIEXEC, beside this Python,
#: on PATH); where there is none, the path beside this Python names it in skip messages.
MPIEXEC = Path(find_mpiexec() or Path(sys.executable).parent / "mpiexec")


def shared_data_root() -> Path | None:
    """../shared/data beside the checkout (CI lays it there), or FEDSHEAF_SHARED_DATA."""
    candidates = [
        os.environ.get("FEDSHEAF_SHARED_DATA"),
        REPO.parent / "shared" / "data",
        "/work/shared/data",
    ]
    for c in candidates:
        if c and (Path(c) / "FashionMNIST" / "raw").is_dir():
            return Path(c)
    return None


@pytest.fixture
def fmnist_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("no shared FashionMNIST copy (../shared/data) on this machine")
    return root


def mpi_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        FEDSHEAF_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def mpi_command(n: int, args: list[str]) -> list[str]:
    """The mpiexec command line that runs ``python args...`` on ``n`` ranks."""
    return [str(MPIEXEC), "--oversubscribe", "-n", str(n), sys.executable, *args]


def run_mpi(
    n: int,
    args: list[str],
    cwd: Path | None = None,
    timeout: float = 180,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Launch ``args`` (a Python module/script command line) on ``n`` real MPI ranks."""
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    return subprocess.run(
        mpi_command(n, args),
        cwd=cwd or REPO,
        env=env or mpi_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def mpirun() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_mpi


#: Wall-clock fields of metrics and summaries: never equal between two runs.
TIMING = ("seconds", "train_seconds", "wall_seconds")


def untimed(obj: object) -> object:
    """``obj`` (records, summaries) without its wall-clock fields, for exact comparison."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj
