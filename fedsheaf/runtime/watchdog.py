"""The step watchdog (``train.step_timeout``): a job whose ranks stop making progress ends,
naming the rank that holds it up, instead of waiting for ever.

A rank makes progress when its main thread finishes a training step or a communication
of the runtime (an exchange with its neighbours, a message of the server, a collective of
the job): :mod:`fedsheaf.runtime.heartbeat`. With a timeout, a thread on every rank
(:func:`start`) answers the other ranks' questions and, once training has begun
(:func:`~fedsheaf.runtime.heartbeat.arm`), watches its own rank. When its rank has made no
progress for ``timeout`` seconds it asks every rank of the job how it is (one small
message each, point to point under a tag of its own: the main threads may be waiting in
a collective meanwhile), and names

* ``silent``: the ranks that do not answer within :data:`ANSWER_WAIT` seconds, stopped
  (SIGSTOP, a debugger) or hung in code that keeps their watchdog thread from running;
* else ``working``: the ranks that answer but have worked (not waited) for longer than
  the timeout without finishing a step;
* else ``deadlock``: every rank, when all have waited for longer than the timeout.

The fault handler given to :func:`start` then ends the job. Where no rank is at fault (one
still starting, or one that moved on meanwhile) the watchdog waits another timeout. A
watchdog whose own process was stopped (its clock jumped) does not count that time: a
job suspended as a whole and resumed carries on.

The watchdog thread calls MPI while the main thread may be inside MPI, so it needs
``MPI_THREAD_MULTIPLE`` (:func:`start` refuses otherwise).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from fedsheaf.runtime.heartbeat import PROGRESS
from fedsheaf.util.errors import ConfigError

#: The message tag of the watchdogs' questions and answers (no other message uses it).
TAG = 0x7EDD
#: Seconds an asking watchdog waits for the answers (a live rank answers within a tick).
ANSWER_WAIT = 3.0
#: A gap between two ticks longer than this (seconds, beyond the tick) means this process
#: was stopped (or starved): that time is not counted against its rank.
PAUSE = 2.0
_ASK, _ANSWER = 0.0, 1.0

#: What a fault handler is told: the kind (``silent``, ``working``, ``deadlock``), the
#: ranks at fault and how long (seconds) the asking rank has waited for progress.
FaultHandler = Callable[[str, list[int], float], None]


class Watchdog:
    """The watchdog thread of one rank (:func:`start`)."""

    def __init__(self, comm: Any, timeout: float, on_fault: FaultHandler) -> None:
        self.comm, self.timeout, self.on_fault = comm, float(timeout), on_fault
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.tick = min(1.0, max(0.05, self.timeout / 10))
        self._stop = threading.Event()
        self._inbox = np.zeros(5, dtype=np.float64)
        self._recv = comm.Irecv([self._inbox, MPI.DOUBLE], MPI.ANY_SOURCE, TAG)
        self._sends: list[tuple[Any, np.ndarray]] = []
        self._asked = 0.0  # the number of this watchdog's latest question
        self._answers: dict[int, tuple[float, bool, bool]] = {}
        self._since = time.monotonic()  # progress before this does not count
        self._faulted = False
        self.thread = threading.Thread(target=self._run, name="fedsheaf-watchdog", daemon=True)

    # ---- the thread --------------------------------------------------------------------
    def _run(self) -> None:
        last = time.monotonic()
        try:
            while not self._stop.wait(self.tick):
                now = time.monotonic()
                if now - last > self.tick + PAUSE:  # this process was stopped: resumed now
                    self._since = now
                last = now
                self._poll()
                if PROGRESS.armed and not self._faulted and self._idle(now) > self.timeout:
                    self._ask_everyone()
        except Exception:  # never end the rank from here: the watchdog only goes quiet
            return

    def _idle(self, now: float) -> float:
        return now - max(PROGRESS.beat, self._since)

    def _state(self) -> tuple[float, bool, bool]:
        now = time.monotonic()
        return self._idle(now), PROGRESS.depth > 0, PROGRESS.armed

    def _send(self, dest: int, values: list[float]) -> None:
        buf = np.array(values, dtype=np.float64)
        self._sends.append((self.comm.Isend([buf, MPI.DOUBLE], dest, TAG), buf))

    def _poll(self) -> None:
        """Answer the questions that have come, keep the answers to this rank's own."""
        self._sends = [(r, b) for r, b in self._sends if not r.Test()]
        status = MPI.Status()
        while self._recv.Test(status):
            message, source = self._inbox.copy(), status.Get_source()
            self._recv = self.comm.Irecv([self._inbox, MPI.DOUBLE], MPI.ANY_SOURCE, TAG)
            if message[0] == _ASK:
                idle, waits, armed = self._state()
                self._send(source, [_ANSWER, message[1], idle, float(waits), float(armed)])
            elif message[1] == self._asked:
                self._answers[source] = (float(message[2]), bool(message[3]), bool(message[4]))
            status = MPI.Status()

    def _ask_everyone(self) -> None:
        self._asked += 1
        self._answers = {}
        for rank in range(self.size):
            if rank != self.rank:
                self._send(rank, [_ASK, self._asked, 0.0, 0.0, 0.0])
        deadline = time.monotonic() + ANSWER_WAIT
        while len(self._answers) < self.size - 1 and time.monotonic() < deadline:
            if self._stop.wait(0.02):
                return
            self._poll()
        idle, waits, armed = self._state()
        if not armed or idle <= self.timeout:  # this rank moved on meanwhile
            return
        kind, culprits = judge(self.rank, self.size, self.timeout, self._answers, (idle, waits))
        if not culprits:  # nobody at fault yet (a rank still starting): another timeout
            self._since = time.monotonic()
            return
        self._faulted = True
        self.on_fault(kind, culprits, idle)

    # ---- the main thread ---------------------------------------------------------------
    def stop(self) -> None:
        """End the thread and withdraw its receive (before MPI is finalized)."""
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)
        try:
            self._recv.Cancel()
            self._recv.Wait()
        except Exception:  # MPI finalized already, or ending on an error
            pass


def judge(
    me: int,
    size: int,
    timeout: float,
    answers: dict[int, tuple[float, bool, bool]],
    mine: tuple[float, bool],
) -> tuple[str, list[int]]:
    """Who holds up a job where rank ``me`` has made no progress for longer than
    ``timeout``: ``(kind, ranks)`` from the ``answers`` (rank -> (seconds without
    progress, waiting, armed)) and ``me``'s own (seconds, waiting); no ranks: nobody
    (yet)."""
    silent = [r for r in range(size) if r != me and r not in answers]
    if silent:
        return "silent", silent
    states = {**answers, me: (mine[0], mine[1], True)}
    working = [
        r
        for r, (idle, waits, armed) in sorted(states.items())
        if armed and not waits and idle > timeout
    ]
    if working:
        return "working", working
    if all(armed and waits and idle > timeout for idle, waits, armed in states.values()):
        return "deadlock", sorted(states)
    return "", []


_WATCHDOG: Watchdog | None = None


def start(comm: Any, timeout: float, on_fault: FaultHandler) -> Watchdog:
    """Start this rank's watchdog on ``comm`` (the job's world communicator; from the main
    thread, once). It stops by itself at exit, before MPI is finalized.

    Raises
    ------
    ConfigError
        When this MPI runs without ``MPI_THREAD_MULTIPLE``.
    """
    global _WATCHDOG
    level = MPI.Query_thread()
    if level < MPI.THREAD_MULTIPLE:
        names = {
            MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE",
            MPI.THREAD_FUNNELED: "MPI_THREAD_FUNNELED",
            MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED",
        }
        raise ConfigError(
            "train.step_timeout needs an MPI library that gives MPI_THREAD_MULTIPLE (this "
            f"one gives {names.get(level, level)}); leave train.step_timeout unset"
        )
    if _WATCHDOG is not None:
        return _WATCHDOG
    _WATCHDOG = Watchdog(comm, timeout, on_fault)
    _WATCHDOG.thread.start()
    atexit.register(_WATCHDOG.stop)  # (after mpi4py's: atexit runs it first)
    return _WATCHDOG
