"""Stopping a launched MPI job as a whole: its launcher and every rank it started.

A launcher started with ``start_new_session=True`` leads a session of its own. Open MPI 5
gives each rank a process group of its own inside that session, so ``killpg`` of the
launcher's group reaches the launcher but not the ranks (they end only when they notice
the lost launcher). The session is what holds them all, and Linux's ``/proc`` names each
process's session.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

PROC = Path("/proc")


def process_state(pid: int, proc_root: Path = PROC) -> tuple[str, int] | None:
    """``(state, session id)`` of process ``pid`` from ``/proc``, or None when it is gone."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text()
        # the fields after "(comm)": state ppid pgrp session ...
        state, _, _, session = stat[stat.rindex(")") + 2 :].split()[:4]
        return state, int(session)
    except (OSError, ValueError):
        return None


def live_session(sid: int, proc_root: Path = PROC) -> list[int]:
    """The processes of session ``sid`` that are not zombies."""
    pids = []
    for entry in proc_root.iterdir():
        if entry.name.isdigit():
            found = process_state(int(entry.name), proc_root)
            if found is not None and found[1] == sid and found[0] != "Z":
                pids.append(int(entry.name))
    return pids


def kill_session(launcher: subprocess.Popen, timeout: float = 60) -> bool:
    """SIGKILL every process of the session ``launcher`` leads and wait until none is left.

    ``launcher`` must have been started with ``start_new_session=True``. Returns whether
    anything was killed. A killed Open MPI launcher cannot remove its session directory
    (``ompi.<pid>`` in the temporary directory): that is removed here. Without ``/proc``
    only the launcher's process group is killed. Raises ``TimeoutError`` when processes
    outlive SIGKILL for ``timeout`` seconds (stuck in the kernel).
    """
    if not PROC.is_dir():
        killed = launcher.poll() is None
        if killed:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=timeout)
        return killed
    deadline = time.monotonic() + timeout
    killed = False
    while pids := live_session(launcher.pid):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed = True
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {pids} outlived SIGKILL for {timeout:.0f} s")
        time.sleep(0.05)
    launcher.wait(timeout=timeout)
    if killed:
        shutil.rmtree(Path(tempfile.gettempdir()) / f"ompi.{launcher.pid}", True)
    return killed


def stop_job(launcher: subprocess.Popen, grace: float) -> None:
    """Stop a job politely, then for sure.

    SIGTERM to the launcher's process group (``mpiexec`` passes it on to its ranks, which
    end as on a cluster's preemption), up to ``grace`` seconds for them to go, then
    :func:`kill_session` for whatever is left, ranks included.
    """
    try:
        os.killpg(launcher.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if launcher.poll() is not None and not (PROC.is_dir() and live_session(launcher.pid)):
            return
        time.sleep(0.1)
    kill_session(launcher)


class Terminated(BaseException):
    """SIGTERM reached a process that supervises jobs (raised by the handler
    :func:`raise_on_sigterm` installs), so that it stops its job before it ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def raise_on_sigterm() -> None:
    """Make SIGTERM and SIGHUP (a closed terminal, a dropped ssh session) raise
    :class:`Terminated` in this process (from the main thread), as SIGINT raises
    ``KeyboardInterrupt``: a supervisor killed outright would leave its job, which leads
    a session of its own out of the terminal's reach, running with nobody to wait for it."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminated)


def run_job(
    argv: list[str],
    out: IO[Any],
    env: dict[str, str],
    timeout: float | None = None,
    grace: float = 20.0,
) -> int:
    """Run a job's launcher with its output in ``out``; its exit status.

    The launcher leads a session of its own: a terminal's Ctrl-C reaches this process
    only, which then stops the job (:func:`stop_job`: SIGTERM, and after ``grace``
    seconds SIGKILL for whatever is left, ranks included) before the interrupt goes on,
    as does SIGTERM under :func:`raise_on_sigterm`. A job that outlives ``timeout``
    seconds is stopped the same way and gets exit status 124.
    """
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_job(proc, grace)
        return 124
    except BaseException:  # Ctrl-C, SIGTERM: the job must not outlive its supervisor
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPPING}
        try:  # (a second Ctrl-C must not cut the stopping short)
            stop_job(proc, grace)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        raise


#: What interrupts a supervisor: ignored while it stops its job.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
