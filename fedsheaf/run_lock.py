"""One job per run directory: an exclusive lock that the job's writing rank holds.

Two jobs writing into one run directory (a resume started while the run still trains,
two launches of the same run at once) would interleave their metrics and checkpoints
without any error. The rank that opens the run directory therefore takes an exclusive
``flock`` on ``RUN_DIR/.lock`` and keeps it until its process ends; the kernel drops it
when the process dies, however it dies, so no lock outlives its job. The file itself stays
and names the last holder (host, pid, SLURM job, time), which the refusal quotes.

On a file system without working ``flock`` (Lustre mounted without ``flock``, some NFS
set-ups) nothing is locked and :func:`hold` says so once.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import os
import socket
from pathlib import Path

from fedsheaf.errors import ConfigError

LOCK_FILE = ".lock"

#: path (resolved) -> open descriptor holding its lock, for the life of this process
_HELD: dict[Path, int] = {}

_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def hold(run_dir: str | Path) -> bool:
    """Take the lock on the existing directory ``run_dir`` for the rest of this process.

    Returns whether it is held (False where the file system cannot lock; a note says
    so). Taking a lock this process already holds does nothing.

    Raises
    ------
    ConfigError
        When another process holds it: another job is writing into ``run_dir``.
    """
    path = Path(run_dir).resolve()
    if path in _HELD:
        return True
    lock_path = path / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"cannot create {lock_path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        raise ConfigError(
            f"run directory {path} is in use by another job ({holder or 'holder unknown'}); "
            "wait for it to end (or stop it) before resuming or overwriting this run"
        ) from None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _NO_LOCKS:
            raise ConfigError(f"cannot lock {lock_path}: {exc.strerror or exc}") from None
        print(
            f"fedsheaf: note: the file system of {path} cannot lock files, so nothing "
            "stops a second job from writing into this run at the same time",
            flush=True,
        )
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, _holder().encode(), 0)
    _HELD[path] = fd
    return True


def _holder() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return (
        f"pid {os.getpid()} on {socket.gethostname()}"
        + (f", SLURM job {job}" if job else "")
        + f", since {since}"
    )


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
