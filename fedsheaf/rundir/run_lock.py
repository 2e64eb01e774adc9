"""One job per run directory: an exclusive lock that the job's writing rank holds.

Two jobs writing into one run directory (a resume started while the run still trains,
two launches of the same run at once) would interleave their metrics and checkpoints
without any error. The rank that opens the run directory therefore takes an exclusive
``flock`` on ``RUN_DIR/.fedsheaf.lock`` and keeps it until its process ends (a job run
from Python, until the job ends: :func:`release_all`); the kernel drops it when the
process dies, however it dies. The file itself stays and names the
last holder (host, pid, SLURM job, time), which the refusal quotes.

Limits: on a file system without working ``flock`` (Lustre mounted without ``flock``,
some NFS set-ups) nothing is locked and :func:`hold` says so once; where locks are
kept per node (Lustre ``localflock``, NFS ``local_lock``) only jobs on the same node
are kept apart; and NFS keeps a crashed node's lock until that node restarts (removing
the lock file then lets a new job in).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import CHOSEN, get_logger

logger = get_logger(__name__)

LOCK_FILE = ".fedsheaf.lock"

#: path (resolved) -> open descriptor holding its lock, for the life of this process
_HELD: dict[Path, int] = {}
#: directories whose file system cannot lock (said once)
_UNLOCKABLE: set[Path] = set()

_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def hold(run_dir: str | Path) -> bool:
    """Take the lock on the existing directory ``run_dir`` for the rest of this process.

    Returns whether it is held. False where the file system cannot lock (a note says
    so, once) or where no lock file can be opened (a directory this user may not write:
    the run directory's own checks then refuse it with their reason). Taking a lock this
    process already holds does nothing.

    Raises
    ------
    ConfigError
        When another process holds it: another job is writing into ``run_dir``.
    """
    path = Path(run_dir).resolve()
    if path in _HELD:
        return True
    if path in _UNLOCKABLE:
        return False
    lock_path = path / LOCK_FILE
    fd = _open(lock_path)
    if fd is None:
        return False
    try:
        _lock_within(fd, PROBE_WAIT)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        raise in_use(path, holder) from None
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _NO_LOCKS:
            raise ConfigError(f"cannot lock {lock_path}: {exc.strerror or exc}") from None
        _UNLOCKABLE.add(path)
        logger.info(
            f"fedsheaf: note: the file system of {path} cannot lock files, so nothing "
            "stops a second job from writing into this run at the same time",
            extra=CHOSEN,
        )
        return False
    try:  # who holds it, for a refused job's message; the lock holds without it
        os.ftruncate(fd, 0)
        os.pwrite(fd, _holder().encode(), 0)
    except OSError:
        pass
    _HELD[path] = fd
    return True


#: Seconds a job keeps trying for a lock that is taken: long enough for a :func:`probe`
#: (which holds it for microseconds) to be no refusal.
PROBE_WAIT = 1.0


def release_all() -> None:
    """Let go of every lock this process holds: a job run from Python (``fedsheaf.run``)
    has ended, finished or refused, and the session goes on (a later job, or one in
    another process, may then open the run)."""
    while _HELD:
        _, fd = _HELD.popitem()
        os.close(fd)  # (closing the descriptor drops its flock)


def in_use(path: Path, holder: str) -> ConfigError:
    """The refusal of a job (or ``fedsheaf check``) for a run directory that the job
    named by ``holder`` (its lock file's line) holds."""
    return ConfigError(
        f"run directory {path} is in use by another job ({holder or 'holder unknown'}); "
        "wait for it to end (or stop it) before resuming or overwriting this run. If "
        f"no such job runs any more (its node crashed), remove {path / LOCK_FILE}"
    )


def _lock_within(fd: int, seconds: float) -> None:
    """Take the exclusive lock on ``fd``, trying for up to ``seconds``; BlockingIOError
    when it stays taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def probe(run_dir: str | Path) -> bool | None:
    """Whether a job holds ``run_dir``'s lock now, for readers (``watch``, ``report``,
    ``check``) that must tell a running job from one that has ended without a word
    (SIGKILL, a lost node). None when that cannot be told: no lock file (a run from
    before the lock, or a job not started yet), or a file system that cannot lock.

    Takes the lock shared for an instant, without creating or changing anything; a job
    starting at that instant waits for it (:data:`PROBE_WAIT`). Where locks are kept
    per node (Lustre ``localflock``), a job on another node looks like none.
    """
    path = Path(run_dir).resolve()
    if path in _HELD:
        return True
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # (closing drops the shared lock)
    return False


def holder(run_dir: str | Path) -> str:
    """The last holder's line in ``run_dir``'s lock file (host, pid, SLURM job, since),
    or ``""``."""
    try:
        return (Path(run_dir) / LOCK_FILE).read_text(errors="replace").strip()
    except OSError:
        return ""


#: Descriptors of the locks :func:`first_to_lock` won, held for the life of the process.
_ELECTED: list[int] = []


def first_to_lock(path: Path) -> bool:
    """Whether this process is the first of its job to lock the existing file ``path``
    (a lock takes no disk space): the one to report an error that ends the job when
    ``failed.json`` cannot be written. The lock is held until the process ends; one
    that cannot be taken at all (no such file, no locks) makes every rank report."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:
        os.close(fd)
        return True
    _ELECTED.append(fd)
    return True


def held(run_dir: str | Path) -> bool:
    """Whether this process holds ``run_dir``'s lock (:func:`hold`)."""
    return Path(run_dir).resolve() in _HELD


def _open(lock_path: Path) -> int | None:
    """A descriptor on the lock file (made if missing; its mode follows the umask), read
    only where it may not be written (flock needs no write access); None if neither."""
    try:
        return os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        pass
    try:
        return os.open(lock_path, os.O_RDONLY)
    except OSError:
        return None


def _holder() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    where = f"pid {os.getpid()} on {socket.gethostname()}"
    return where + (f", SLURM job {job}" if job else "") + f", since {since}"


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
