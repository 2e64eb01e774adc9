"""Stopping a run early, at the next epoch (round) end, with a checkpoint: on SIGUSR1.

A batch system warns a job before ending it: SLURM's ``--signal=USR1@300`` sends SIGUSR1
to every task five minutes before the time limit (the ``slurm/`` scripts ask for it).
Each rank's handler only sets a flag. After every epoch (round) the checkpoint hook ORs
the flags over the job (one small allreduce), so all ranks decide alike; if any rank
was signalled, every rank writes its checkpoint, whether or not one was due, and the run
ends (:func:`exit_status`). The resumed run continues from that checkpoint exactly as
from any other.

A planned stop is no failure, so the ranks of a launched job leave with status 0: a
non-zero one makes the launcher report a crash (Open MPI's "prterun detected that one
or more processes exited with non-zero status", srun's "error: ... Exited with exit
code", and ``srun --kill-on-bad-exit`` then kills the ranks still leaving). What says the
run stopped is the run directory's ``stopped.json``, rank 0's last line, and, where
:data:`NOTE_ENV` names a file, that file, which rank 0 writes (run directory and epoch)
before any rank leaves: the ``slurm/`` scripts requeue the job when they find it, or exit
with :data:`STOPPED_EXIT`. A process run without a launcher (an MPI singleton) exits
with :data:`STOPPED_EXIT` itself.

With ``checkpoint.every=0`` (no checkpoints) the signal is ignored: there would be
nothing to continue from, so the run goes on until the job ends it.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType

from fedsheaf.util.log import RANK_VARIABLES

SIGNAL = signal.SIGUSR1
#: The exit status of a run stopped on request (EX_TEMPFAIL: "try again later").
STOPPED_EXIT = 75
#: The environment variable naming the file that says "stopped on request".
NOTE_ENV = "FEDSHEAF_STOPPED_FILE"

_requested = False


class StopRequested(Exception):
    """Raised on every rank of a job once the checkpoint of ``run_dir`` after epoch
    (round) ``done`` is written."""

    def __init__(self, run_dir: Path, done: int) -> None:
        super().__init__(f"{run_dir} stopped on request after {done}")
        self.run_dir, self.done = run_dir, done


def _note(signum: int, frame: FrameType | None) -> None:
    global _requested
    _requested = True


def _ignore(signum: int, frame: FrameType | None) -> None:
    # os.write, not logging: logging (its locks) is not safe in a signal handler
    os.write(
        2,
        b"fedsheaf: SIGUSR1 ignored: this run writes no checkpoints "
        b"(checkpoint.every=0), so it cannot stop early and continue later\n",
    )


def _ignore_quietly(signum: int, frame: FrameType | None) -> None:
    pass


def install(checkpoints: bool = True, announce: bool = True) -> None:
    """Let :data:`SIGNAL` request a stop, or, for a run without checkpoints, be ignored
    with a note (from the main thread; elsewhere a no-op). ``announce`` False ignores it
    without the note: every rank is signalled, and rank 0 alone says so.

    ``fedsheaf run`` installs the handler first thing, so that a signal during start-up
    (imports, MPI initialisation) does not kill the rank with SIGUSR1's default action,
    and again once MPI is up and the config read: MPICH-family MPIs set a SIGUSR1
    handler of their own at initialisation (to report failed processes), which this
    replaces; with them, a process-failure notice then reads as a stop request.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(SIGNAL, _note if checkpoints else _ignore if announce else _ignore_quietly)


def requested() -> bool:
    """Whether this rank has received :data:`SIGNAL` since :func:`install`."""
    return _requested


def exit_status() -> int:
    """This process's exit status after a stop on request: 0 under a launcher (mpiexec,
    srun: a non-zero status would read as a crash), :data:`STOPPED_EXIT` without one."""
    launched = any(os.environ.get(name, "").strip().isdigit() for name in RANK_VARIABLES)
    return 0 if launched else STOPPED_EXIT


