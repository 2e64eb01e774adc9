"""Stopping a job as a whole: a launcher whose workers sit in process groups of their own
(as Open MPI 5's ranks do) and ignore SIGTERM is still stopped completely."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsheaf.ops.processes import kill_session, live_session, process_state, stop_job

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")

# A launcher like mpiexec: two workers, each in a process group of its own. Stubborn: the
# launcher passes SIGTERM on to its workers, as mpiexec does, and everyone notes it and
# carries on (a rank stuck in a collective does not act on it). Otherwise the launcher
# dies of SIGTERM without passing it on.
LAUNCHER = """
import os, pathlib, signal, subprocess, sys, time
ready, stubborn = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
worker = (
    "import os, pathlib, signal, sys, time\\n"
    "here = pathlib.Path(sys.argv[1])\\n"
    "def noted(*_): (here / f'term-{os.getpid()}').touch()\\n"
    "if sys.argv[2] == '1': signal.signal(signal.SIGTERM, noted)\\n"
    "(here / str(os.getpid())).touch()\\n"
    "while True: time.sleep(600)\\n"
)
workers = []
if stubborn:  # before the workers exist: they say they are ready only once started
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(w.pid, signal.SIGTERM) for w in workers])
workers += [
    subprocess.Popen([sys.executable, "-c", worker, str(ready), sys.argv[2]],
                     preexec_fn=os.setpgrp)
    for _ in range(2)
]
for w in workers:
    w.wait()
"""


@pytest.fixture
def start(tmp_path: Path):
    """Start the stand-in job (``start(stubborn)``); whatever is left of it is killed after
    the test."""
    launchers: list[subprocess.Popen] = []

    def begin(stubborn: bool) -> tuple[subprocess.Popen, list[int]]:
        ready = tmp_path / "ready"
        ready.mkdir()
        launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(ready), "1" if stubborn else "0"],
            start_new_session=True,
        )
        launchers.append(launcher)
        deadline = time.monotonic() + 60
        while len(list(ready.iterdir())) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        workers = [int(p.name) for p in ready.iterdir()]
        assert set(workers) <= set(live_session(launcher.pid))
        return launcher, workers

    yield begin
    for launcher in launchers:
        kill_session(launcher)


def gone(pid: int, sid: int) -> bool:
    return process_state(pid) in (None, ("Z", sid))


def assert_all_gone(launcher: subprocess.Popen, workers: list[int]) -> None:
    assert launcher.returncode is not None and not live_session(launcher.pid)
    assert all(gone(pid, launcher.pid) for pid in workers)


def test_a_killpg_of_the_launcher_leaves_workers_that_a_session_kill_reaches(start):
    launcher, workers = start(stubborn=False)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    time.sleep(0.2)
    assert all(not gone(pid, launcher.pid) for pid in workers)  # what the old code left
    assert sorted(live_session(launcher.pid)) == sorted(workers)
    assert kill_session(launcher)
    assert_all_gone(launcher, workers)


def test_stop_job_kills_what_ignores_sigterm_after_the_grace(start, tmp_path):
    launcher, workers = start(stubborn=True)
    began = time.monotonic()
    stop_job(launcher, grace=1)
    assert time.monotonic() - began >= 1  # SIGKILL only once the grace was over
    ready = tmp_path / "ready"
    assert sorted((ready / f"term-{pid}").exists() for pid in workers) == [True, True]
    assert_all_gone(launcher, workers)


def test_stop_job_reaches_workers_the_launchers_sigterm_did_not(start):
    launcher, workers = start(stubborn=False)
    # SIGTERM to the launcher's group ends the launcher; the workers, in groups of
    # their own, stay, and stop_job kills them once the grace is over
    stop_job(launcher, grace=1)
    assert_all_gone(launcher, workers)
    assert not kill_session(launcher)  # nothing left to kill


# A supervisor like `fedsheaf sweep --local`: runs the stand-in job with run_job.
# (A suite started in the background, `run/test.sh &`, hands its processes SIGINT
# ignored, and Python then keeps it ignored: the supervisor restores Ctrl-C's default.)
SUPERVISOR = """
import signal, sys
from fedsheaf.ops.processes import Terminated, raise_on_sigterm, run_job
signal.signal(signal.SIGINT, signal.default_int_handler)
raise_on_sigterm()
try:
    run_job([sys.executable, "-c", sys.argv[1], sys.argv[2], "0"], sys.stdout, {}, grace=1)
except (KeyboardInterrupt, Terminated) as exc:
    print("stopped:", type(exc).__name__, flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_supervisor_that_is_interrupted_stops_its_job_first(tmp_path, signum):
    ready = tmp_path / "ready"
    ready.mkdir()
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, LAUNCHER, str(ready)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(ready.iterdir())) < 2:
            assert supervisor.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        workers = [int(p.name) for p in ready.iterdir()]
        os.kill(supervisor.pid, signum)
        out, _ = supervisor.communicate(timeout=60)
    finally:
        if supervisor.poll() is None:
            kill_session(supervisor)
    assert supervisor.returncode == 3, out
    assert out.strip() == "stopped: " + (
        "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"
    )
    # the workers, in process groups of their own, went with the launcher
    assert all(process_state(pid) in (None,) or process_state(pid)[0] == "Z" for pid in workers)
