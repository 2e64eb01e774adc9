"""Server <-> clients over MPI: broadcast from rank 0, gather to rank 0, byte counters.

Rank 0 is the server; ranks 1..W host the clients. Everything moves as
contiguous numpy buffers (float32 parameter vectors, int64 client ids, float64
reports) through ``Ibcast`` and ``Igatherv``, never as pickles. The workers can
also share rows among themselves (``Iallgatherv`` on a workers-only
communicator; the server takes no part): the runtime's own plumbing, e.g.
private client state that follows a client to another worker. Under dynamic
placement the server deals client ids one at a time to the worker that asks
(``Send``/``Irecv`` of one int64 each way). Waiting ranks
poll the request and sleep between polls, so a server waiting for minutes of
client training, or a worker waiting for slower workers, does not spin a core
(important when ranks outnumber cores).

Byte counters are kept on every rank from its own point of view; the server's
are the interesting ones: ``<kind>_down`` counts a broadcast once per receiving
rank, ``<kind>_up`` the bytes gathered, ``<kind>_between_workers`` what the
workers received from each other.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from fedsheaf.runtime import heartbeat
from fedsheaf.runtime.world import World

SERVER = 0
#: Point-to-point tags of dynamic dealing (a worker asks, the server gives a client id).
TAG_ASK, TAG_GIVE = 11, 12
#: What the server gives a worker when no client is left this round.
NO_CLIENT = -1


class Star:
    """Collective server/client exchange on ``comm`` (server = rank 0).

    Parameters
    ----------
    comm:
        Communicator holding the server and every worker rank.
    poll_max:
        Longest sleep (seconds) between two polls of a pending request.
    """

    def __init__(self, comm: MPI.Comm, poll_max: float = 0.005) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.poll_max = poll_max
        self.bytes: Counter[str] = Counter()
        self._workers: MPI.Comm | None = None

    @property
    def is_server(self) -> bool:
        return self.rank == SERVER

    @property
    def n_workers(self) -> int:
        return self.size - 1

    def _wait(self, req: MPI.Request, status: MPI.Status | None = None) -> None:
        delay = 1e-5
        with heartbeat.waiting():
            while not req.Test(status):
                time.sleep(delay)
                delay = min(2 * delay, self.poll_max)

    def deal(self, order: Sequence[int], kind: str) -> dict[int, int]:
        """Server: hand out ``order`` one client at a time, each to the first worker
        that asks (:meth:`ask`), then :data:`NO_CLIENT` to every worker once.

        Returns client id -> the rank that asked for it. Every worker must ask until
        it gets :data:`NO_CLIENT`, or the server waits for it.
        """
        if not self.is_server:
            raise RuntimeError("deal runs on the server")
        left, where, done = list(order), {}, 0
        ask, give = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        while done < self.n_workers:
            status = MPI.Status()
            self._wait(self.comm.Irecv([ask, MPI.INT64_T], MPI.ANY_SOURCE, TAG_ASK), status)
            worker = status.Get_source()
            give[0] = left.pop(0) if left else NO_CLIENT
            if give[0] == NO_CLIENT:
                done += 1
            else:
                where[int(give[0])] = worker
            self.comm.Send([give, MPI.INT64_T], dest=worker, tag=TAG_GIVE)
            self.bytes[f"{kind}_down"] += give.nbytes
            self.bytes[f"{kind}_up"] += ask.nbytes
        return where

    def ask(self, kind: str) -> int:
        """Worker: the next client to train this round, or :data:`NO_CLIENT`."""
        ask, give = np.zeros(1, dtype=np.int64), np.empty(1, dtype=np.int64)
        self.comm.Send([ask, MPI.INT64_T], dest=SERVER, tag=TAG_ASK)
        self._wait(self.comm.Irecv([give, MPI.INT64_T], SERVER, TAG_GIVE))
        self.bytes[f"{kind}_sent"] += ask.nbytes
        return int(give[0])

    def bcast(self, buf: np.ndarray, kind: str) -> np.ndarray:
        """Broadcast the server's ``buf`` into every rank's ``buf`` (same shape, dtype).

        Returns ``buf`` (filled in place on the workers).
        """
        if not buf.flags.c_contiguous:
            raise ValueError("bcast needs a contiguous buffer")
        self._wait(self.comm.Ibcast([buf, from_numpy_dtype(buf.dtype)], root=SERVER))
        if self.is_server:
            self.bytes[f"{kind}_down"] += buf.nbytes * self.n_workers
        else:
            self.bytes[f"{kind}_received"] += buf.nbytes
        return buf

    def gather(
        self, rows: np.ndarray, kind: str, counts: Sequence[int] | None = None
    ) -> np.ndarray | None:
        """Gather every rank's ``rows`` (k_r × width) to the server, in rank order.

        The server passes ``counts`` (rows held by each rank 0..W) and gets one
        ``(sum(counts), width)`` array; the other ranks get None. Width and dtype
        must agree on all ranks.
        """
        rows = np.ascontiguousarray(rows)
        if rows.ndim != 2:
            raise ValueError(f"gather sends 2-D row blocks, got shape {rows.shape}")
        width, dtype = rows.shape[1], from_numpy_dtype(rows.dtype)
        if not self.is_server:
            self._wait(self.comm.Igatherv([rows, dtype], None, root=SERVER))
            self.bytes[f"{kind}_sent"] += rows.nbytes
            return None
        if counts is None or len(counts) != self.size:
            raise ValueError(f"the server must pass {self.size} row counts")
        elems = [int(c) * width for c in counts]
        displs = np.concatenate([[0], np.cumsum(elems)[:-1]]).astype(int).tolist()
        out = np.empty((int(sum(counts)), width), dtype=rows.dtype)
        send = np.empty((0, width), dtype=rows.dtype)
        self._wait(self.comm.Igatherv([send, dtype], [out, (elems, displs), dtype], root=SERVER))
        self.bytes[f"{kind}_up"] += out.nbytes
        return out

    def open_worker_group(self) -> None:
        """Make the workers-only communicator :meth:`allgather_workers` uses.

        Collective over every rank (the server included); a second call does nothing.
        """
        if self._workers is None:
            color = MPI.UNDEFINED if self.is_server else 0
            self._workers = self.comm.Split(color, key=self.rank)

    def close(self) -> None:
        """Free the workers-only communicator, if one was opened (collective, like
        :meth:`open_worker_group`); the star stays usable for everything else."""
        if self._workers is not None and self._workers != MPI.COMM_NULL:
            self._workers.Free()
        self._workers = None

    def allgather_workers(
        self, rows: np.ndarray, kind: str, counts: Sequence[int]
    ) -> np.ndarray | None:
        """Every worker's ``rows`` (k_r × width) to every worker, in rank order.

        Every rank passes ``counts`` (rows held by each rank 0..W; the server's
        must be 0) and a 2-D ``rows`` of the common width and dtype. Workers get
        the ``(sum(counts), width)`` array; the server only counts the bytes the
        workers received from each other and gets None. Needs
        :meth:`open_worker_group` first.
        """
        if self._workers is None:
            raise RuntimeError("allgather_workers needs open_worker_group first")
        rows = np.ascontiguousarray(rows)
        if rows.ndim != 2:
            raise ValueError(f"allgather_workers sends 2-D row blocks, got shape {rows.shape}")
        if len(counts) != self.size or counts[SERVER] != 0:
            raise ValueError(f"pass {self.size} row counts, the server's 0")
        width, total = rows.shape[1], int(sum(counts))
        row_bytes = width * rows.dtype.itemsize
        if self.is_server:
            self.bytes[f"{kind}_between_workers"] += sum(
                (total - int(c)) * row_bytes for c in counts[1:]
            )
            return None
        if rows.shape[0] != counts[self.rank]:
            raise ValueError(f"rank {self.rank} holds {rows.shape[0]} rows, counts say {counts}")
        elems = [int(c) * width for c in counts[1:]]
        displs = np.concatenate([[0], np.cumsum(elems)[:-1]]).astype(int).tolist()
        out = np.empty((total, width), dtype=rows.dtype)
        dtype = from_numpy_dtype(rows.dtype)
        self._wait(self._workers.Iallgatherv([rows, dtype], [out, (elems, displs), dtype]))
        self.bytes[f"{kind}_received"] += out.nbytes - rows.nbytes
        return out

    def take_bytes(self) -> dict[str, int]:
        """Byte counts since the last call (then reset)."""
        out, self.bytes = dict(self.bytes), Counter()
        return out


class StarHub:
    """What an agent or the server needs from the star: rows up, one matrix down."""

    def __init__(self, star: Star) -> None:
        self.star = star

    @property
    def n_agents(self) -> int:
        return self.star.n_workers

    def upload(self, rows: np.ndarray, kind: str) -> None:
        """Agent: send ``rows`` (same shape on every agent) to the server."""
        self.star.gather(np.ascontiguousarray(rows), kind)

    def collect(self, shape: tuple[int, int], kind: str, dtype: Any = np.float32) -> np.ndarray:
        """Server: every agent's rows, stacked as ``(n_agents, *shape)`` in agent order."""
        counts = [0] + [shape[0]] * self.n_agents
        got = self.star.gather(np.empty((0, shape[1]), dtype=dtype), kind, counts)
        assert got is not None
        return got.reshape(self.n_agents, *shape)

    def broadcast(self, mat: np.ndarray | None, shape: tuple[int, int], kind: str) -> np.ndarray:
        """Server: send ``mat`` to every agent; agent (``mat`` None): receive it."""
        buf = np.ascontiguousarray(mat, dtype=np.float32) if mat is not None else None
        if buf is None:
            buf = np.empty(shape, dtype=np.float32)
        return self.star.bcast(buf, kind)

    def take_bytes(self) -> dict[str, int]:
        return self.star.take_bytes()


def agent_world(world: World, comm: Any) -> World:
    return World(
        comm=comm,
        rank=world.rank - 1,
        size=world.size - 1,
        local_rank=world.local_rank,
        local_size=world.local_size,
        device=world.device,
        first_rank=1,
        threads=world.threads,
    )


def split_off_server(world: World) -> Any:
    """A communicator of ranks 1..N-1 (the agents of a hub run); rank 0 gets none."""
    return world.comm.Split(MPI.UNDEFINED if world.rank == 0 else 1, world.rank)
