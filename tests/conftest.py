"""Shared test helpers: repo paths, the shared data root, and an mpiexec launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from fedsheaf.ops.processes import kill_session
from fedsheaf.util.hostinfo import LOCAL_BTL, failed_to_start, find_mpiexec

# Property tests explore random examples on a developer's machine; under CI they replay a
# fixed set, so that a landing never depends on the examples drawn that day, with no
# per-example deadline (a loaded machine may stall any one example).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The suite's ranks share this machine: Open MPI without libfabric's transport, as the
# local launchers start it (fedsheaf.util.hostinfo.LOCAL_BTL: 1 s less a process).
os.environ.setdefault("OMPI_MCA_btl", LOCAL_BTL)

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


# ----------------------------------------------------------------- the checkout is left as found

#: What installing and running the suite may leave in the checkout, never compared: the
#: virtual environment, the package metadata, byte code and the tools' caches (hypothesis
#: keeps its example database in .hypothesis/).
CHECKOUT_NOISE = (".venv", ".hypothesis", ".pytest_cache", ".ruff_cache", ".mypy_cache")
_NOISE_SPECS = [f":(exclude){name}" for name in CHECKOUT_NOISE] + [
    ":(exclude,glob)**/__pycache__/**",
    ":(exclude,glob)*.egg-info/**",
]
#: Set to 1 to leave the comparison out (a checkout edited while the suite runs).
NO_CHECKOUT_CHECK = "FEDSHEAF_TEST_NO_CHECKOUT_CHECK"
#: A path's git status, and for an ignored file its modification time and size.
PathState = tuple[str, int, int] | tuple[str]
_CHECKOUT_KEY = pytest.StashKey["dict[str, PathState] | None"]()


def checkout_state() -> dict[str, PathState] | None:
    """``git status --porcelain --ignored`` of the checkout, file by file (untracked and
    ignored folders listed in full), without :data:`CHECKOUT_NOISE`; an ignored file (runs/,
    report/, data/ ...) also with its modification time and size, so that a test that
    rewrites one a user left there is seen too. None where git cannot tell (no git, not a
    checkout)."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all"]
            + ["--", ".", *_NOISE_SPECS],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    state: dict[str, PathState] = {}
    entries = iter(proc.stdout.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":  # a staged rename or copy: its source path follows
            next(entries, None)
        if code == "!!":
            try:
                st = (REPO / path).lstat()
            except OSError:
                state[path] = (code,)
                continue
            state[path] = (code, st.st_mtime_ns, st.st_size)
        else:
            state[path] = (code,)
    return state


def checkout_changes(before: dict[str, PathState], after: dict[str, PathState]) -> list[str]:
    """What changed between two :func:`checkout_state` results, one line a path: a new
    untracked or ignored file, a tracked one modified or deleted, one rewritten, one gone."""

    def what(state: PathState) -> str:
        code = state[0]
        if code in ("??", "!!"):
            return "new"
        return "deleted" if "D" in code else "modified"

    lines = [f"  {what(after[p]):<9}{p}" for p in sorted(after.keys() - before.keys())]
    both = sorted(before.keys() & after.keys())
    lines += [f"  {'changed':<9}{p}" for p in both if before[p] != after[p]]
    lines += [f"  {'gone':<9}{p}" for p in sorted(before.keys() - after.keys())]
    return lines


def _controller(config: pytest.Config) -> bool:
    """Whether this is the process that runs the session (not a pytest-xdist worker)."""
    return not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config) and os.environ.get(NO_CHECKOUT_CHECK) != "1":
        session.config.stash[_CHECKOUT_KEY] = checkout_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when the tests left the checkout other than they found it: every
    test writes under its own temporary folder, never runs/, report/, data/ or graphs/."""
    before = session.config.stash.get(_CHECKOUT_KEY, None)
    if before is None or not _controller(session.config):
        return
    after = checkout_state()
    if after is None:
        return
    changes = checkout_changes(before, after)
    if not changes:
        return
    shown = changes[:30] + ([f"  ... and {len(changes) - 30} more"] if len(changes) > 30 else [])
    message = "\n".join(
        [
            f"the test suite changed the checkout {REPO} (git status --porcelain --ignored); "
            "every test must write under its own tmp_path:",
            *shown,
            f"(files edited by hand while the suite ran show here too: {NO_CHECKOUT_CHECK}=1 "
            "leaves this check out)",
        ]
    )
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "checkout changed", red=True)
        reporter.write_line(message)
    else:
        print(message, file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Wall-clock fields of metrics and summaries: never equal between two runs.
#: keys that differ between runs of the same numbers: timings, memory, and the bytes that
#: crossed MPI (which depend on how many ranks held the agents)
TIMING = ("seconds", "train_seconds", "wall_seconds", "memory", "mpi_bytes_sent")


def untimed(obj: object) -> object:
    """``obj`` (records, summaries) without what the machine decides (wall-clock times,
    peak memory), for exact comparison."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj


# ------------------------------------------------------- several `fedsheaf run`s in one launch

#: Runs each argv of the JSON list in argv[1] as ``fedsheaf <argv>`` (the command line's
#: own :func:`fedsheaf.cli.main.main`, its messages and exit status included) one after
#: another in this one MPI job; rank 0 marks where each run's output starts and ends.
BATCH_SCRIPT = """\
import json, sys
from mpi4py import MPI
from fedsheaf.cli.main import main

comm, mark = MPI.COMM_WORLD, sys.argv[2]
for i, argv in enumerate(json.loads(open(sys.argv[1]).read())):
    sys.stdout.flush(); sys.stderr.flush(); comm.Barrier()
    if comm.rank == 0:
        line = f"{mark} start {i}"
        print(line, flush=True); print(line, file=sys.stderr, flush=True)
    comm.Barrier()
    try:
        code = main(argv)
    except SystemExit as exc:  # a refusal every rank agreed on
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush(); sys.stderr.flush(); comm.Barrier()
    if comm.rank == 0:
        line = f"{mark} end {i} {code}"
        print(line, flush=True); print(line, file=sys.stderr, flush=True)
from fedsheaf.runtime.world import exit_at_once
exit_at_once(0)
"""


def run_mpi_batch(
    n: int,
    runs: list[list[str]],
    work: Path,
    timeout: float = 400,
    env: dict[str, str] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """``fedsheaf ARGS`` for each ARGS of ``runs``, one after another in ONE job of ``n``
    real MPI ranks (one torch import per rank instead of one per run: the cost of a short
    run on 2 cores). Each run's result as if launched alone: its exit status and rank 0's
    standard output and error between its marks (other ranks' lines may stray across a
    mark). A run that ends the whole job (an abort) gets the job's status, and runs after
    it never ran (status None)."""
    work.mkdir(parents=True, exist_ok=True)
    script, plan = work / "batch_script.py", work / f"batch-{time.monotonic_ns()}.json"
    script.write_text(BATCH_SCRIPT)
    plan.write_text(json.dumps(runs))
    mark = "@@fedsheaf-test-batch@@"
    proc = run_mpi(n, [str(script), str(plan), mark], timeout=timeout, env=env)

    def pieces(text: str) -> dict[int, tuple[str, int | None]]:
        found: dict[int, tuple[str, int | None]] = {}
        current: int | None = None
        lines: list[str] = []
        for line in text.splitlines(keepends=True):
            if line.startswith(mark):
                words = line.split()
                if words[1] == "start":
                    current, lines = int(words[2]), []
                elif current is not None:
                    found[current] = ("".join(lines), int(words[3]))
                    current = None
                continue
            lines.append(line)
        if current is not None:  # the job ended inside this run
            found[current] = ("".join(lines), None)
        return found

    out, err = pieces(proc.stdout), pieces(proc.stderr)
    results = []
    for i, argv in enumerate(runs):
        if i not in out:  # never ran: what the job said, to tell why
            results.append(subprocess.CompletedProcess(argv, None, proc.stdout, proc.stderr))
            continue
        stdout, code = out[i]
        if code is None:
            code = proc.returncode or 1
        results.append(subprocess.CompletedProcess(argv, code, stdout, err.get(i, ("", 0))[0]))
    return results
