"""Shared test helpers: repo paths, the shared data root, and an mpiexec launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from fedsheaf.ops.processes import kill_session
from fedsheaf.util.hostinfo import failed_to_start, find_mpiexec

# Property tests explore random examples on a developer's machine; under CI they replay a
# fixed set, so that a landing never depends on the examples drawn that day, with no
# per-example deadline (a loaded machine may stall any one example).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

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


def mpi_command(n: int, args: list[str], mpiexec: Path = MPIEXEC) -> list[str]:
    """The mpiexec command line that runs ``python args...`` on ``n`` ranks."""
    return [str(mpiexec), "--oversubscribe", "-n", str(n), sys.executable, *args]


def run_mpi(
    n: int,
    args: list[str],
    cwd: Path | None = None,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    mpiexec: Path = MPIEXEC,
) -> subprocess.CompletedProcess[str]:
    """Launch ``args`` (a Python module/script command line) on ``n`` real MPI ranks.

    A launch that mpiexec failed to start in a known transient way
    (:func:`fedsheaf.util.hostinfo.failed_to_start`: it ran nothing) is started once more, so
    that Open MPI's sporadic start failures do not fail the suite.
    """
    if not mpiexec.exists():
        pytest.skip(f"mpiexec not found at {mpiexec}")
    for attempt in (1, 2):
        proc = subprocess.run(
            mpi_command(n, args, mpiexec),
            cwd=cwd or REPO,
            env=env or mpi_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode == 0 or not failed_to_start(proc.stdout + proc.stderr):
            break
        print(f"run_mpi: mpiexec failed to start the job (attempt {attempt}):\n{proc.stderr}")
    return proc


class BackgroundMpi:
    """``python args...`` on ``n`` real MPI ranks, started in the background with its output
    in ``log``, for tests that launch several jobs at once or act on a job while it runs.

    As :func:`run_mpi` does, a job that mpiexec failed to start in a known transient way is
    started once more; :meth:`poll` notices this and restarts it. Concurrent launches are
    where Open MPI 5's sporadic start failures occur most here.
    """

    def __init__(
        self,
        n: int,
        args: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        mpiexec: Path = MPIEXEC,
    ) -> None:
        if not mpiexec.exists():
            pytest.skip(f"mpiexec not found at {mpiexec}")
        self.command = mpi_command(n, args, mpiexec)
        self.log = log
        self.env = env or mpi_env()
        self.starts = 0
        self._start()

    def _start(self) -> None:
        self.starts += 1
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # for kill()
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def poll(self) -> int | None:
        """The job's exit status, or None while it runs (or has just been restarted)."""
        code = self.proc.poll()
        if code not in (None, 0) and self.starts == 1 and failed_to_start(self.output()):
            print(f"BackgroundMpi: mpiexec failed to start the job:\n{self.output()}")
            self._start()
            return None
        return code

    def kill(self) -> None:
        """SIGKILL the whole job at once, as a preemption does, and wait until it is gone:
        the launcher and every rank (:func:`fedsheaf.ops.processes.kill_session`)."""
        kill_session(self.proc)

    def wait(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds in all for the job (and a restart) to end."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(self.command, timeout)
            try:
                self.proc.wait(timeout=min(remaining, 1.0))
            except subprocess.TimeoutExpired:
                pass
        return code


@pytest.fixture
def mpirun() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_mpi


#: Wall-clock fields of metrics and summaries: never equal between two runs.
TIMING = ("seconds", "train_seconds", "wall_seconds", "memory")


def untimed(obj: object) -> object:
    """``obj`` (records, summaries) without what the machine decides (wall-clock times,
    peak memory), for exact comparison."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj
