"""The MPI world: ranks, roles, devices, threads, logging and failure handling.

Rules this module enforces for the whole job:

* An uncaught exception on any rank prints one message naming the rank and
  calls ``MPI.COMM_WORLD.Abort`` so the job ends instead of hanging. Once the run
  directory is known, the first rank to write its ``failed.json`` is the one that
  prints: ranks that fail together (every agent diverging at one step) say it once.
* User-caused errors (:class:`~fedsheaf.util.errors.FedsheafError`) found before
  training by every rank are checked *collectively* (:meth:`World.agree`):
  rank 0 prints each distinct message once and every rank exits with status 2.
* SIGTERM and SIGINT (a cancelled job, Ctrl-C, a launcher that is stopped) end the
  rank as the signal would, once one rank has said so in one line and in the run's
  ``failed.json`` (:func:`install_signal_ends`): a job ended that way is not taken for
  one still running.
* A rank that vanishes without a word (SIGKILL, out of memory) is named by a rank of the
  same node the moment its process ends (:mod:`fedsheaf.runtime.peers`), before the
  launcher ends the job: its signals come too fast for a note written on SIGTERM.
* With ``train.step_timeout`` (:func:`watch_steps`), a job whose ranks stop making
  progress (one of them stopped by SIGSTOP) ends, naming the rank that holds it up.
* Rank 0 is the only rank that logs progress.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch
from mpi4py import MPI

from fedsheaf.runtime import heartbeat, peers, watchdog
from fedsheaf.util import memory
from fedsheaf.util.errors import FedsheafError
from fedsheaf.util.hostinfo import (
    gpus_of_rank,
    pid_namespace,
    process_state,
    threads_per_rank,
    unusable_gpus,
    usable_cpu_ids,
)
from fedsheaf.util.log import CHOSEN, get_logger

logger = get_logger(__name__)

T = TypeVar("T")
USER_ERROR_EXIT = 2


#: The run directory of this job once it is the run's (:func:`note_run_dir`).
_RUN_DIR: Path | None = None
#: When this rank started: a failed.json younger than this is this job's.
_STARTED = time.time()
#: Seconds a rank whose failure another rank reports waits before it aborts the job.
REPORTER_GRACE = 2.0


#: Writes a rank's failure into the run directory; returns whether this rank is the one to
#: say it (``write_failure(run_dir, rank, error, since)``). Set with the run directory.
_write_failure: Callable[[Path, int, str, float], bool] | None = None
#: Files whose writing since this rank started says the job has ended already.
_ENDING_FILES: tuple[str, ...] = ()
#: The other ranks of the job on this node (and PID namespace): world rank -> pid.
_PEERS = peers.PEERS
#: This process's rank in the job, once :func:`init_world` has run.
_RANK: int | None = None
#: What a rank is, where it is more than a rank (``{0: "the server"}``): :func:`note_role`.
_ROLES: dict[int, str] = {}


def note_run_dir(
    path: Path,
    write_failure: Callable[[Path, int, str, float], bool],
    ending_files: tuple[str, ...],
) -> None:
    """From now on an error that ends the job is also written to ``path`` (with
    ``write_failure``: :func:`fedsheaf.rundir.lifecycle.follow_run_dir` passes the run
    directory's own), so that ``fedsheaf watch`` and ``report`` can tell a dead run from
    a running one; ``ending_files`` written since this rank started mean the job has
    said how it ended already. The runtime knows no file of a run directory itself."""
    global _RUN_DIR, _write_failure, _ENDING_FILES
    _RUN_DIR, _write_failure, _ENDING_FILES = Path(path), write_failure, ending_files
    heartbeat.arm()  # training begins (where a step timeout is set: watch_steps)


def note_role(rank: int, role: str) -> None:
    """Name world rank ``rank``'s part in the job (``"the server"``) where the job's last
    words name that rank."""
    _ROLES[rank] = role


def _who(ranks: list[int]) -> str:
    """``rank 0 (the server)``, ``ranks 1, 3``: the subject of a line about ``ranks``."""
    if len(ranks) == 1:
        role = _ROLES.get(ranks[0])
        return f"rank {ranks[0]}" + (f" ({role})" if role else "")
    return f"ranks {_ranks(ranks)}"


def _abort_hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    rank = MPI.COMM_WORLD.Get_rank()
    size = MPI.COMM_WORLD.Get_size()
    user_error = isinstance(exc, FedsheafError)
    code = USER_ERROR_EXIT if user_error else 1
    # (written to stderr itself, not logged: the last words of a dying rank, said whatever
    # -q or the rank, and nothing that logging might do must keep the abort from coming)
    try:  # saying why must not keep the job from ending (stderr may be gone)
        if user_error:
            error = str(exc)
            message = f"fedsheaf: error on {_who([rank])}: {exc}\n"
        else:
            error = f"{exc_type.__name__}: {exc}"
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            message = f"fedsheaf: {_who([rank])} failed with {error}\n{text}"
        if (
            _RUN_DIR is None
            or _write_failure is None
            or _write_failure(_RUN_DIR, rank, error, _STARTED)
        ):
            sys.stderr.write(message)
            sys.stderr.flush()
        else:  # another rank says it: give it time to, before this abort ends the job
            time.sleep(REPORTER_GRACE)
    except Exception:
        pass
    finally:
        peers.mark_ending(rank)  # said: the node's other ranks do not name it vanished
        if size > 1:
            MPI.COMM_WORLD.Abort(code)
    sys.exit(code)


def exit_at_once(code: int) -> NoReturn:
    """End this rank, its work done, without the interpreter's teardown.

    Python's finalisation of a process that has imported torch (freeing its modules,
    then the C++ destructors of its libraries) costs 0.5–1 s of CPU per process; all the
    ranks of a job pay it together, several to a core on a laptop, which kept ``mpiexec``
    from returning for seconds after a short run had ended. Nothing of a run is left to
    it: every file is written and closed before here. So this runs the ``atexit``
    functions, flushes the standard streams, finalizes MPI (as mpi4py would at exit) and
    leaves with ``os._exit``. While another non-daemon thread runs, it exits as usual
    instead (which waits for the thread).
    """
    peers.mark_ending(_RANK)  # (before it ends: its node's other ranks look then)
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(not t.daemon for t in others):
        sys.exit(code)
    try:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a reader gone: nothing more can be said to it
                pass
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    finally:
        os._exit(code)


def install_abort_hook() -> None:
    """Make any uncaught exception on this rank abort the whole MPI job."""
    sys.excepthook = _abort_hook


#: The signals that end a rank with a note (:func:`install_signal_ends`).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


#: Set once this rank leaves on purpose (a stop on request, a refusal said already): a
#: launcher then terminating the other ranks (srun --kill-on-bad-exit) is no failure.
_LEAVING = False


def leaving() -> None:
    """Say that this rank is ending on purpose: SIGTERM or SIGINT from now on end it
    without a note."""
    global _LEAVING
    _LEAVING = True
    peers.mark_ending(_RANK)
    heartbeat.disarm()


def _ended_already() -> bool:
    """Whether this job's run has already said how it ended (stopped.json, summary.json
    written since this rank started)."""
    for name in _ENDING_FILES:
        try:
            if _RUN_DIR is not None and (_RUN_DIR / name).stat().st_mtime >= _STARTED:
                return True
        except OSError:
            continue
    return False


def _vanished() -> list[int]:
    """The ranks of this node whose process has ended, not on purpose (:data:`_PEERS`)."""
    return peers.vanished()


#: Whether this rank has said (or decided not to say) why its signal ends it.
_SAID = False
_SAYING = threading.Lock()


def _say_ending(signum: int) -> None:
    """Once per rank, from the signal handler or (while the main thread waits inside
    MPI) the signal watch thread: say why the job ends on signal ``signum``.

    A rank of this node whose process has already ended (the launcher terminates the
    others when one vanishes: SIGKILL, out of memory) is named instead of this one. Only
    once the run directory is known: before that, a vanished rank may be one that
    aborted with its own message.
    """
    global _SAID
    peers.mark_ending(_RANK)  # this rank ends with a word: not one that vanished
    with _SAYING:
        if _SAID:
            return
        _SAID = True
    # the rank known at start-up: no MPI call here, which from the signal watch thread,
    # while the main thread waits inside MPI, could block and leave the rank silent
    rank = _RANK if _RANK is not None else MPI.COMM_WORLD.Get_rank()
    name = signal.Signals(signum).name
    if _LEAVING or _ended_already():
        return
    gone = _vanished()
    if _RUN_DIR is None or _write_failure is None:
        if rank != 0 or gone:
            return
        who, error = [rank], f"terminated by {name} ({_CAUSES})"
    else:
        if gone:
            # the first to vanish is not known; the others may have ended since on the
            # launcher's signal: name one, a rank with a role (the server) first
            first = sorted(gone, key=lambda r: (r not in _ROLES, r))[0]
            who, error = [first], _vanished_error([first], rank, name)
        else:
            who, error = [rank], f"terminated by {name} ({_CAUSES})"
        error += f"; to continue the run: fedsheaf run --resume {_RUN_DIR}"
        if not _write_failure(_RUN_DIR, who[0], error, _STARTED):
            return
    # os.write, not logging: logging (its locks) is not safe in a signal handler
    os.write(2, f"fedsheaf: {_who(who)} {error}\n".encode())


#: Why a rank may get SIGTERM or SIGINT when no rank of its node has vanished.
_CAUSES = "the job was cancelled, its launcher stopped, or a rank on another node died"


def _vanished_error(gone: list[int], rank: int, name: str | None = None) -> str:
    """What ``failed.json`` says of ranks ``gone`` (their processes ended without a word)
    when rank ``rank`` of their node found them gone: at once (:func:`_peers_vanished`), or
    once it got signal ``name`` from the launcher."""
    also = f" (so did {_who(gone[1:])})" if len(gone) > 1 else ""
    seen = (
        f"the launcher then ended the job (rank {rank}: {name})"
        if name
        else f"rank {rank} of its node saw it end, the launcher ends the job"
    )
    return (
        f"ended without a word{also}: killed by a signal (SIGKILL, out of memory) or a "
        f"crash outside Python, the launcher's message says which; {seen}"
    )


def _peers_vanished(gone: list[int]) -> None:
    """The peer watch thread (:func:`fedsheaf.runtime.peers.watch`): ranks ``gone`` of
    this node have just ended without a word. Once the run directory is known and unless
    this rank has said why it ends already (or leaves on purpose, or the run has ended):
    name one (a rank with a role first, as :func:`_say_ending` does) in ``failed.json``
    and in one line, now, before the launcher's signals end this rank."""
    global _SAID
    if _RUN_DIR is None or _write_failure is None or _LEAVING:
        return
    with _SAYING:
        if _SAID:
            return
        _SAID = True
    peers.mark_ending(_RANK)  # (the launcher's signals end it next: not named vanished)
    if _ended_already():
        return
    rank = _RANK if _RANK is not None else -1
    first = sorted(gone, key=lambda r: (r not in _ROLES, r))[0]
    error = _vanished_error([first], rank)
    error += f"; to continue the run: fedsheaf run --resume {_RUN_DIR}"
    if _write_failure(_RUN_DIR, first, error, _STARTED):
        os.write(2, f"fedsheaf: {_who([first])} {error}\n".encode())


def _end_on_signal(signum: int, frame: Any) -> None:
    for sig in ENDING_SIGNALS:  # a second signal must not cut this one's note short
        signal.signal(sig, signal.SIG_IGN)
    try:  # quickly: a launcher that passes the signal on may kill the rank soon after
        _say_ending(signum)
    except Exception:
        pass
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # ends as the signal does: its exit status tells the shell


def _watch_signals(fd: int) -> None:
    """The signal watch thread: Python runs a signal handler only once the main thread
    is back in Python, which a rank waiting inside MPI (a collective whose peer has
    vanished) may never be before its launcher kills it. The C-level handler writes each
    signal's number to ``fd`` (:func:`signal.set_wakeup_fd`) at once."""
    ending = {int(s) for s in ENDING_SIGNALS}
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in ending and signal.getsignal(signum) is _end_on_signal:
                try:
                    _say_ending(signum)
                except Exception:
                    pass


_WATCHING = False


def _start_signal_watch() -> None:
    global _WATCHING
    if _WATCHING:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read)
        os.close(write)
        return
    _WATCHING = True
    threading.Thread(
        target=_watch_signals, args=(read,), name="fedsheaf-signals", daemon=True
    ).start()


def install_signal_ends() -> None:
    """End this rank on SIGTERM or SIGINT as their default action would, after one rank
    of the job (the first to write ``failed.json``; rank 0 before the run directory is
    known) has said so on standard error.

    Python's defaults would end the rank silently (SIGTERM) or with a traceback from
    every rank (SIGINT), and leave a run directory that ``fedsheaf watch`` follows as if
    its job still ran. A rank blocked inside an MPI call runs the handler only when the
    call returns, so a thread says it meanwhile (:func:`_watch_signals`); the note stays
    best effort: a launcher may kill the ranks soon after it passes the signal on (Open
    MPI's ``mpiexec`` does, within about a second).
    """
    if threading.current_thread() is threading.main_thread():
        for sig in ENDING_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # (a background job's SIGINT)
                signal.signal(sig, _end_on_signal)
        _start_signal_watch()


def _step_fault(kind: str, culprits: list[int], waited: float, timeout: float) -> None:
    """The step watchdog's fault handler (its thread): say once for the job which ranks
    hold it up (``failed.json``'s first writer says it), then abort the job."""
    limit = f"train.step_timeout={timeout:g}"
    if kind == "silent":
        states = {process_state(_PEERS[r]) for r in culprits if r in _PEERS}
        why = (
            "its process is stopped: SIGSTOP, or a debugger"
            if states == {"stopped"}
            else "its process has ended"
            if states == {"gone"}
            else "stopped, or hung where its watchdog thread cannot run"
        )
        does = "does" if len(culprits) == 1 else "do"
        error = f"{does} not answer ({why}): the job made no progress for {waited:.0f} s"
    elif kind == "working":
        has = "has" if len(culprits) == 1 else "have"
        error = f"{has} not finished a step in {waited:.0f} s while the other ranks wait"
    else:
        error = f"have all waited for each other for {waited:.0f} s (a deadlock)"
    error += f" ({limit}), so the job was ended"
    subject = _who(culprits)
    peers.mark_ending(_RANK)  # (this rank says it, or leaves it to the one that does)
    try:
        if _RUN_DIR is not None and _write_failure is not None:
            error += f"; to continue the run: fedsheaf run --resume {_RUN_DIR}"
            shown = error if len(culprits) == 1 else f"{subject} {error}"
            say = _write_failure(_RUN_DIR, culprits[0], shown, _STARTED)
        else:
            say = True
        if say:
            sys.stderr.write(f"fedsheaf: {subject} {error}\n")
            sys.stderr.flush()
        else:  # another rank says it: give it time to, before this abort ends the job
            time.sleep(REPORTER_GRACE)
    except Exception:
        pass
    finally:
        MPI.COMM_WORLD.Abort(1)


def watch_steps(timeout: float | None) -> None:
    """With a ``timeout`` (``train.step_timeout``), start this rank's step watchdog
    (:mod:`fedsheaf.runtime.watchdog`; armed once training begins, :func:`note_run_dir`):
    a job whose ranks make no progress for ``timeout`` seconds ends, naming the rank that
    holds it up (one that does not answer: stopped by SIGSTOP). Every rank calls it."""
    if timeout is None:
        return

    def fault(kind: str, culprits: list[int], waited: float) -> None:
        _step_fault(kind, culprits, waited, timeout)

    watchdog.start(MPI.COMM_WORLD, timeout, fault)


class UserErrorExit(SystemExit):
    """Raised on every rank after a collectively detected user error; ``message`` is the
    error's words as rank 0 said them (the same on every rank), for callers that raise
    them again (:func:`fedsheaf.run`)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(code)
        self.message = message


@dataclass
class World:
    """This rank's view of the MPI job."""

    comm: Any = field(repr=False)
    rank: int
    size: int
    local_rank: int
    local_size: int
    device: torch.device
    #: World rank of this communicator's rank 0 (a sub-world, e.g. the agents of a hub
    #: run, names ranks in messages as the job does).
    first_rank: int = 0
    #: Torch threads of every rank of the job (:func:`init_world`).
    threads: int = 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def log(self, msg: str) -> None:
        """Say a progress line (INFO, standard output) from rank 0 only."""
        if self.is_root:  # (a hub run's agents' rank 0 is the job's rank 1: CHOSEN)
            logger.info(msg, extra=CHOSEN)

    def warn(self, msg: str) -> None:
        """Say a warning (standard error) from rank 0 only."""
        if self.is_root:
            logger.warning(msg)

    def barrier(self) -> None:
        with heartbeat.waiting():
            self.comm.Barrier()

    def gather(self, obj: Any) -> list[Any] | None:
        """Gather a small picklable object to rank 0 (None elsewhere)."""
        with heartbeat.waiting():
            return self.comm.gather(obj, root=0)

    def peak_memory(self, devices: list[torch.device] | None = None) -> dict[str, Any] | None:
        """Collectively: every rank's peak memory so far, as one record on rank 0
        (:func:`fedsheaf.util.memory.per_rank`; None elsewhere); on a GPU, the most on one
        of ``devices`` (default: the rank's device)."""
        peaks = self.gather(memory.peak_memory(devices or [self.device]))
        return memory.per_rank(peaks) if peaks is not None else None

    def bcast(self, obj: Any) -> Any:
        with heartbeat.waiting():
            return self.comm.bcast(obj, root=0)

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank (collective)."""
        with heartbeat.waiting():
            return bool(self.comm.allreduce(bool(flag), op=MPI.LOR))

    def agree(self, fn: Callable[[], T], root_only: bool = False) -> T:
        """Run ``fn`` on every rank; if it raises a user error anywhere, stop everywhere.

        Rank 0 prints each distinct message once (with the ranks it came from)
        and every rank raises :class:`UserErrorExit` (status 2). This is how
        validation of config, graph, rank count and data files stays to one
        readable message instead of one traceback per rank. With ``root_only``, ``fn``
        runs on rank 0 alone (the others return None) and checks the job's business (its
        run directory, its data's fingerprint): its error is said without a rank.
        """
        error: str | None = None
        result: Any = None
        try:
            result = fn() if self.is_root or not root_only else None
        except FedsheafError as exc:
            error = str(exc)
        with heartbeat.waiting():
            errors = self.comm.allgather(error)
        if any(e is not None for e in errors):
            by_msg: dict[str, list[int]] = {}
            for r, e in enumerate(errors):
                if e is not None:
                    by_msg.setdefault(e, []).append(r)
            said = []
            for msg, ranks in by_msg.items():
                shown = [r + self.first_rank for r in ranks]
                everywhere = root_only or len(ranks) == self.size
                where = "" if everywhere else f" (rank {_ranks(shown)})"
                said.append(f"{msg}{where}")
                if self.is_root:
                    logger.error(f"fedsheaf: error{where}: {msg}")
            leaving()
            raise UserErrorExit(USER_ERROR_EXIT, "; ".join(said))
        return result


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def choose_device(preference: str, local_rank: int) -> torch.device:
    """CUDA device by node-local rank when GPUs exist (and allowed), else CPU."""
    if preference != "cpu" and torch.cuda.is_available():
        # same config + seed => same numbers on a GPU too: no autotuned or atomics-based
        # cuDNN kernels (tests/gpu checks two runs for equality)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if preference == "cuda":
        raise FedsheafError("train.device=cuda but no CUDA device is visible on this node")
    return torch.device("cpu")


def rank_gpus(world: World) -> list[torch.device]:
    """The devices this rank may give its agents: on a GPU, every GPU of the node it owns
    (:func:`fedsheaf.util.hostinfo.gpus_of_rank`, its own device first); else its device."""
    if world.device.type != "cuda":
        return [world.device]
    ids = gpus_of_rank(world.local_rank, world.local_size, torch.cuda.device_count())
    return [torch.device("cuda", i) for i in ids] or [world.device]


def refuse_unusable_gpus() -> None:
    """For ``train.device=auto`` on the CPU: a job given GPUs that torch cannot use is an
    error (:func:`fedsheaf.util.hostinfo.unusable_gpus`), not a silent run on the CPU."""
    why = unusable_gpus()
    if why:
        raise FedsheafError(why)


def rank_threads(masks: list[set[int]], local_rank: int) -> int:
    """``FEDSHEAF_THREADS``, else this rank's share of the CPUs it may run on
    (:func:`fedsheaf.util.hostinfo.threads_per_rank`, from every local rank's affinity mask)."""
    env = os.environ.get("FEDSHEAF_THREADS", "").strip()
    if env and not (env.isdigit() and int(env) >= 1):
        raise FedsheafError(f"FEDSHEAF_THREADS must be a positive integer, got {env!r}")
    return int(env) if env else threads_per_rank(masks, local_rank)


def _share_marks(local: Any, ranks: list[int]) -> tuple[Any, dict[int, int]]:
    """Collectively on this node's communicator ``local`` (world ``ranks`` in its order):
    the marks its ranks share (:mod:`fedsheaf.runtime.peers`) and each rank's byte; None
    unless every rank of the node has mapped them."""
    size = local.Get_size()
    path = peers.create_marks(size) if local.Get_rank() == 0 else None
    path = local.bcast(path, root=0)
    marks = peers.attach_marks(path, size) if path is not None else None
    shared = local.allreduce(marks is not None, op=MPI.LAND)
    if path is not None and local.Get_rank() == 0:
        peers.forget_marks(path)  # every rank has it mapped (or has given up)
    if not shared:
        if marks is not None:
            marks.close()
        return None, {}
    return marks, {rank: slot for slot, rank in enumerate(ranks)}


def init_world(device: str = "auto") -> World:
    """Initialise this rank: abort hook, signal ends, node-local rank, threads, device."""
    install_abort_hook()
    install_signal_ends()
    global _RANK
    comm = MPI.COMM_WORLD
    _RANK = comm.Get_rank()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    local_rank, local_size = local.Get_rank(), local.Get_size()
    masks = local.allgather(set(usable_cpu_ids()))
    # the node's other ranks, to name one that vanishes (_peers_vanished, _say_ending)
    me = (comm.Get_rank(), os.getpid(), pid_namespace())
    node = local.allgather(me)
    marks, slots = _share_marks(local, [rank for rank, _, _ in node])
    peers.note_peers(
        me[0],
        {rank: pid for rank, pid, space in node if rank != me[0] and space == me[2]},
        marks,
        slots,
    )
    peers.watch(_peers_vanished)
    local.Free()
    world = World(
        comm=comm,
        rank=comm.Get_rank(),
        size=comm.Get_size(),
        local_rank=local_rank,
        local_size=local_size,
        device=torch.device("cpu"),
    )
    # the same count on every rank, the smallest any rank would take: CPU kernels round
    # differently with other thread counts, so a client trained on any worker (dynamic
    # placement) or an agent on any node gives the same numbers
    mine = world.agree(lambda: rank_threads(masks, local_rank))
    world.threads = int(comm.allreduce(mine, op=MPI.MIN))
    torch.set_num_threads(world.threads)
    world.device = world.agree(lambda: choose_device(device, local_rank))
    return world
