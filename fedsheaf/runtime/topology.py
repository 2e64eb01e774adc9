"""Neighbour exchange over an MPI distributed-graph communicator.

Each rank talks only to its graph neighbours. Matrices travel as contiguous
float32 buffers through neighbourhood collectives (``Ineighbor_allgatherv`` for
one message to all neighbours, ``Ineighbor_alltoallv`` for a different message
per neighbour); their shapes may differ per neighbour (different latent sizes
d_j). When the caller already knows the shapes it will receive (pilot matrices
are d_j × K), it passes them and no shape header is sent.

``start_exchange``/``start_exchange_each`` post the collective and return a
:class:`PendingExchange` whose ``wait()`` returns the received matrices;
``exchange``/``exchange_each`` are the two in one call. The training step uses the
split form to back-propagate the private batch while the pilots are in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from fedsheaf.runtime import heartbeat

Shape = tuple[int, int]


def _as_buffer(mat: torch.Tensor | np.ndarray) -> np.ndarray:
    """A float32 C-contiguous copy: the caller may change ``mat`` while a send is in flight."""
    if isinstance(mat, torch.Tensor):
        t = mat.detach()
        if t.device.type != "cpu" or t.dtype != torch.float32:  # .to() copies already
            buf = np.ascontiguousarray(t.to("cpu", torch.float32).numpy())
        else:
            buf = np.array(t.numpy(), order="C", copy=True)
    else:
        buf = np.array(mat, dtype=np.float32, order="C", copy=True)
    if buf.ndim != 2:
        raise ValueError(f"neighbour exchange sends 2-D matrices, got shape {buf.shape}")
    return buf


class PendingExchange:
    """A posted neighbourhood collective; :meth:`wait` completes it (once).

    Holds the send and receive buffers until completion, as MPI requires.
    """

    def __init__(
        self,
        request: MPI.Request,
        keep: tuple[np.ndarray, ...],
        recv: np.ndarray,
        split: Callable[[np.ndarray], list[torch.Tensor]],
    ) -> None:
        self._request, self._keep, self._recv, self._split = request, keep, recv, split
        self._result: list[torch.Tensor] | None = None

    def wait(self) -> list[torch.Tensor]:
        """Block until every neighbour's message has arrived; return them in neighbour order."""
        if self._result is None:
            with heartbeat.waiting():
                self._request.Wait()
            self._result = self._split(self._recv)
            self._keep = ()
        return self._result


class EdgePort:
    """An agent's side of its graph edges: per-neighbour byte counters, and the blocking
    exchanges built on the ``start_*`` forms a subclass provides (:class:`Neighbourhood`:
    one agent per rank; :class:`~fedsheaf.runtime.colocated.AgentPort`: agents sharing a
    rank)."""

    def __init__(self, neighbours: Sequence[int]) -> None:
        self.neighbours = [int(j) for j in neighbours]
        self.bytes_total = {j: 0 for j in self.neighbours}
        self.bytes_round = {j: 0 for j in self.neighbours}

    #: whether a started exchange completes only once this rank's other agents have run
    #: up to it (agents sharing a rank): an algorithm should then back-propagate what it
    #: can before ``wait()``, or the rank holds every agent's graphs at once
    meets_other_agents = False

    @property
    def degree(self) -> int:
        return len(self.neighbours)

    def _count(self, sent: Sequence[int]) -> None:
        for j, n in zip(self.neighbours, sent, strict=True):
            self.bytes_total[j] += n
            self.bytes_round[j] += n

    def take_round_bytes(self) -> dict[int, int]:
        """Bytes sent to each neighbour since the last call (then reset)."""
        out, self.bytes_round = self.bytes_round, {j: 0 for j in self.neighbours}
        return out

    def start_exchange(
        self,
        mat: torch.Tensor | np.ndarray,
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> Any:
        raise NotImplementedError

    def start_exchange_each(
        self,
        mats: Sequence[torch.Tensor | np.ndarray],
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> Any:
        raise NotImplementedError

    def exchange(
        self,
        mat: torch.Tensor | np.ndarray,
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> list[torch.Tensor]:
        """Send the same matrix to every neighbour; return theirs in neighbour order."""
        got: list[torch.Tensor] = self.start_exchange(mat, shapes, device).wait()
        return got

    def exchange_each(
        self,
        mats: Sequence[torch.Tensor | np.ndarray],
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> list[torch.Tensor]:
        """Send ``mats[k]`` to neighbour k; return what each neighbour sent to us."""
        got: list[torch.Tensor] = self.start_exchange_each(mats, shapes, device).wait()
        return got


class Neighbourhood(EdgePort):
    """This rank's neighbours and the collectives that reach them.

    Parameters
    ----------
    comm:
        The world (or any) communicator containing every graph node as a rank.
    neighbours:
        Ranks adjacent to this one, in the order results are returned.
    """

    def __init__(self, comm: MPI.Intracomm, neighbours: Sequence[int]) -> None:
        super().__init__(neighbours)
        self.comm = comm.Create_dist_graph_adjacent(self.neighbours, self.neighbours, reorder=False)
        sources, destinations, _ = self.comm.Get_dist_neighbors()
        if list(sources) != self.neighbours or list(destinations) != self.neighbours:
            raise RuntimeError("MPI reordered the neighbour lists of the dist-graph communicator")

    def _split(
        self, recv: np.ndarray, shapes: Sequence[Shape], device: torch.device | None
    ) -> list[torch.Tensor]:
        out, offset = [], 0
        for rows, cols in shapes:
            n = rows * cols
            t = torch.from_numpy(recv[offset : offset + n].reshape(rows, cols))
            out.append(t.to(device) if device is not None else t)
            offset += n
        return out

    @staticmethod
    def _layout(shapes: Sequence[Shape]) -> tuple[list[int], list[int], int]:
        counts = [int(r) * int(c) for r, c in shapes]
        displs = (
            np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist() if counts else []
        )
        return counts, displs, sum(counts)

    def _shapes_of_one(self, buf: np.ndarray, shapes: Sequence[Shape] | None) -> list[Shape]:
        """The receive shapes: given, else one blocking header round (16 B per neighbour)."""
        if shapes is not None:
            return list(shapes)
        header = np.empty((self.degree, 2), dtype=np.int64)
        with heartbeat.waiting():
            self.comm.Neighbor_allgather(np.array(buf.shape, dtype=np.int64), header)
        self._count([16] * self.degree)
        return [(int(s[0]), int(s[1])) for s in header]

    def _shapes_of_each(
        self, bufs: Sequence[np.ndarray], shapes: Sequence[Shape] | None
    ) -> list[Shape]:
        if shapes is not None:
            return list(shapes)
        send_shapes = np.array([b.shape for b in bufs], dtype=np.int64).reshape(-1, 2)
        header = np.empty((self.degree, 2), dtype=np.int64)
        with heartbeat.waiting():
            self.comm.Neighbor_alltoall(send_shapes, header)
        self._count([16] * self.degree)
        return [(int(s[0]), int(s[1])) for s in header]

    def start_exchange(
        self,
        mat: torch.Tensor | np.ndarray,
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> PendingExchange:
        """Post the sending of one matrix to every neighbour; ``wait()`` returns theirs.

        ``shapes`` (one (rows, cols) per neighbour) skips the shape header when
        the caller knows what it will receive; without it the header round blocks.
        """
        buf = _as_buffer(mat)
        shapes = self._shapes_of_one(buf, shapes)
        counts, displs, total = self._layout(shapes)
        recv = np.empty(total, dtype=np.float32)
        request = self.comm.Ineighbor_allgatherv(
            [buf, MPI.FLOAT], [recv, (counts, displs), MPI.FLOAT]
        )
        self._count([buf.nbytes] * self.degree)
        return PendingExchange(request, (buf,), recv, lambda r: self._split(r, shapes, device))

    def start_exchange_each(
        self,
        mats: Sequence[torch.Tensor | np.ndarray],
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> PendingExchange:
        """Post ``mats[k]`` to neighbour k; ``wait()`` returns what each sent to us."""
        if len(mats) != self.degree:
            raise ValueError(f"exchange_each needs {self.degree} matrices, got {len(mats)}")
        bufs = [_as_buffer(m) for m in mats]
        shapes = self._shapes_of_each(bufs, shapes)
        scounts, sdispls, _ = self._layout([b.shape for b in bufs])
        send = np.concatenate([b.ravel() for b in bufs]) if bufs else np.empty(0, np.float32)
        rcounts, rdispls, total = self._layout(shapes)
        recv = np.empty(total, dtype=np.float32)
        request = self.comm.Ineighbor_alltoallv(
            [send, (scounts, sdispls), MPI.FLOAT], [recv, (rcounts, rdispls), MPI.FLOAT]
        )
        self._count([b.nbytes for b in bufs])
        return PendingExchange(request, (send,), recv, lambda r: self._split(r, shapes, device))

    def free(self) -> None:
        self.comm.Free()
