"""The other ranks of this node: which of them have ended, and whether on purpose. Without
MPI: :func:`fedsheaf.runtime.world.init_world` finds the ranks and shares the marks.

A rank that vanishes without a word (SIGKILL, out of memory, a crash outside Python) cannot
say so itself, and its launcher ends the others within a fraction of a second (Open MPI's:
SIGTERM about 0.25 s after it notices, SIGKILL at most 0.25 s later), often before a
signal handler of theirs could write a note. So a thread of every rank (:func:`watch`)
wakes the moment a rank of its node ends (a pidfd per rank, Linux 5.3 and later; else it
looks every :data:`POLL` seconds) and says so at once, before the launcher's signals.

A rank's end is a vanishing only if it did not mark it first (:func:`mark_ending`): one
byte per rank of the node, in a small shared file that no longer has a name once every
rank has mapped it (:func:`create_marks`, :func:`attach_marks`). A rank marks its end
when it leaves on purpose (its job done, stopped on request, refused) or has said why it
ends (its exception, a signal).
"""

from __future__ import annotations

import mmap
import os
import select
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from fedsheaf.util.hostinfo import process_state

#: The other ranks of the job on this node (and PID namespace): world rank -> pid.
PEERS: dict[int, int] = {}
#: Seconds between two looks where pidfds are not available, and how many of the node's
#: ranks each rank then looks at (the next ones in rank order, cyclically: every rank is
#: looked at by as many, and a node of many ranks does not read /proc all the time).
POLL = 0.1
LOOK_AT = 4

#: One byte per rank of this node (nonzero: its end is no vanishing), and each rank's byte.
_marks: mmap.mmap | None = None
_slots: dict[int, int] = {}
#: Pidfds of :data:`PEERS` (pidfd -> rank), opened while every rank is known to run.
_pidfds: dict[int, int] = {}
_watching = False
_me = -1


def create_marks(size: int) -> str | None:
    """The first rank of a node: a new shared file of ``size`` zero bytes (in ``/dev/shm``
    where there is one), whose path the node's ranks then map (:func:`attach_marks`);
    None where it cannot be made."""
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    path = os.path.join(folder, f".fedsheaf-ranks-{uuid.uuid4().hex}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        forget_marks(path)
        return None
    os.close(fd)
    return path


def attach_marks(path: str, size: int) -> mmap.mmap | None:
    """Map the node's shared marks at ``path`` (None where it cannot be)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def forget_marks(path: str) -> None:
    """Remove the marks' name once every rank of the node has mapped them (they stay
    shared until the last of the ranks ends; nothing is left on disk)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def note_peers(
    rank: int,
    peers: dict[int, int],
    marks: mmap.mmap | None = None,
    slots: dict[int, int] | None = None,
) -> None:
    """This rank (``rank``), the node's other ranks (world rank -> pid) and, where every
    rank of the node has mapped them, the marks shared with them (``slots``: world rank ->
    its byte). Again in the same process (a second run): new marks, the same ranks."""
    global _marks, _slots, _me
    _marks, _slots = marks, dict(slots or {})
    if PEERS or _watching:
        return
    PEERS.update(peers)
    _me = rank
    if marks is None or not hasattr(os, "pidfd_open"):
        return
    for rank, pid in sorted(peers.items()):
        try:
            _pidfds[os.pidfd_open(pid)] = rank
        except ProcessLookupError:  # ended already: the first look will find it so
            continue
        except OSError:  # pidfds refused (a kernel before 5.3, a sandbox): look instead
            for fd in _pidfds:
                os.close(fd)
            _pidfds.clear()
            return


def mark_ending(rank: int | None) -> None:
    """Say to the node's other ranks that world rank ``rank`` (this one) ends on purpose or
    having said why: its end is no vanishing. A store to shared memory: safe anywhere,
    a signal handler included."""
    slot = _slots.get(rank) if rank is not None else None
    if _marks is not None and slot is not None:
        try:
            _marks[slot] = 1
        except (ValueError, IndexError):  # (closed)
            pass


def ended_on_purpose(rank: int) -> bool:
    """Whether world rank ``rank`` of this node marked its end (:func:`mark_ending`)."""
    slot = _slots.get(rank)
    if _marks is None or slot is None:
        return False
    try:
        return _marks[slot] != 0
    except (ValueError, IndexError):
        return False


def vanished() -> list[int]:
    """The ranks of this node whose process has ended without marking its end."""
    return [
        r
        for r, pid in sorted(PEERS.items())
        if process_state(pid) == "gone" and not ended_on_purpose(r)
    ]


def watch(on_vanished: Callable[[list[int]], None]) -> bool:
    """Call ``on_vanished(ranks)`` from a thread of its own as soon as ranks of this node
    end without marking their end (those found at one look together, in rank order). Only
    where the node's marks are shared (:func:`note_peers`): without them a rank that leaves
    on purpose would look the same. Returns whether it watches."""
    global _watching
    if _watching or _marks is None or not PEERS:
        return _watching
    _watching = True
    target = _wait_pidfds if _pidfds else _look
    threading.Thread(target=target, args=(on_vanished,), name="fedsheaf-peers", daemon=True).start()
    return True


def _ended(ranks: list[int], on_vanished: Callable[[list[int]], None]) -> None:
    gone = [r for r in sorted(ranks) if not ended_on_purpose(r)]
    if gone:
        try:
            on_vanished(gone)
        except Exception:  # a note that cannot be said: the launcher's message remains
            pass


def _wait_pidfds(on_vanished: Callable[[list[int]], None]) -> None:
    poller = select.poll()
    for fd in _pidfds:
        poller.register(fd, select.POLLIN)
    left = dict(_pidfds)
    _ended(sorted(set(PEERS) - set(left.values())), on_vanished)  # ended before it opened
    while left:
        try:
            ready = poller.poll()
        except OSError:
            return
        ended = []
        for fd, _ in ready:
            if fd in left:
                ended.append(left.pop(fd))
                poller.unregister(fd)
                os.close(fd)
        _ended(ended, on_vanished)


def _look(on_vanished: Callable[[list[int]], None]) -> None:
    ranks = sorted([*PEERS, _me])
    at = ranks.index(_me)
    nearest = [ranks[(at + k) % len(ranks)] for k in range(1, len(ranks))][:LOOK_AT]
    left = {r: PEERS[r] for r in nearest}
    while left:
        time.sleep(POLL)
        ended = [r for r, pid in sorted(left.items()) if process_state(pid) == "gone"]
        for rank in ended:
            del left[rank]
        _ended(ended, on_vanished)
