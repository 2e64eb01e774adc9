"""Neighbour exchange over an MPI distributed-graph communicator.

Each rank talks only to its graph neighbours. Matrices travel as contiguous
float32 buffers through neighbourhood collectives (``Neighbor_allgatherv`` for
one message to all neighbours, ``Neighbor_alltoallv`` for a different message
per neighbour); their shapes may differ per neighbour (different latent sizes
d_j). When the caller already knows the shapes it will receive (pilot matrices
are d_j × K), it passes them and no shape header is sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from mpi4py import MPI

Shape = tuple[int, int]


def _as_buffer(mat: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(mat, torch.Tensor):
        mat = mat.detach().to("cpu", torch.float32).numpy()
    buf = np.ascontiguousarray(mat, dtype=np.float32)
    if buf.ndim != 2:
        raise ValueError(f"neighbour exchange sends 2-D matrices, got shape {buf.shape}")
    return buf


class Neighbourhood:
    """This rank's neighbours and the collectives that reach them.

    Parameters
    ----------
    comm:
        The world (or any) communicator containing every graph node as a rank.
    neighbours:
        Ranks adjacent to this one, in the order results are returned.
    """

    def __init__(self, comm: MPI.Comm, neighbours: Sequence[int]) -> None:
        self.neighbours = [int(j) for j in neighbours]
        self.comm = comm.Create_dist_graph_adjacent(self.neighbours, self.neighbours, reorder=False)
        sources, destinations, _ = self.comm.Get_dist_neighbors()
        if list(sources) != self.neighbours or list(destinations) != self.neighbours:
            raise RuntimeError("MPI reordered the neighbour lists of the dist-graph communicator")
        self.bytes_total = {j: 0 for j in self.neighbours}
        self.bytes_round = {j: 0 for j in self.neighbours}

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

    def exchange(
        self,
        mat: torch.Tensor | np.ndarray,
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> list[torch.Tensor]:
        """Send the same matrix to every neighbour; return theirs in neighbour order.

        ``shapes`` (one (rows, cols) per neighbour) skips the shape header when
        the caller knows what it will receive.
        """
        buf = _as_buffer(mat)
        if shapes is None:
            header = np.empty((self.degree, 2), dtype=np.int64)
            self.comm.Neighbor_allgather(np.array(buf.shape, dtype=np.int64), header)
            shapes = [tuple(map(int, s)) for s in header]
            self._count([16] * self.degree)
        counts, displs, total = self._layout(shapes)
        recv = np.empty(total, dtype=np.float32)
        self.comm.Neighbor_allgatherv([buf, MPI.FLOAT], [recv, (counts, displs), MPI.FLOAT])
        self._count([buf.nbytes] * self.degree)
        return self._split(recv, shapes, device)

    def exchange_each(
        self,
        mats: Sequence[torch.Tensor | np.ndarray],
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> list[torch.Tensor]:
        """Send ``mats[k]`` to neighbour k; return what each neighbour sent to us."""
        if len(mats) != self.degree:
            raise ValueError(f"exchange_each needs {self.degree} matrices, got {len(mats)}")
        bufs = [_as_buffer(m) for m in mats]
        if shapes is None:
            send_shapes = np.array([b.shape for b in bufs], dtype=np.int64).reshape(-1, 2)
            header = np.empty((self.degree, 2), dtype=np.int64)
            self.comm.Neighbor_alltoall(send_shapes, header)
            shapes = [tuple(map(int, s)) for s in header]
            self._count([16] * self.degree)
        scounts, sdispls, _ = self._layout([b.shape for b in bufs])
        send = np.concatenate([b.ravel() for b in bufs]) if bufs else np.empty(0, np.float32)
        rcounts, rdispls, total = self._layout(shapes)
        recv = np.empty(total, dtype=np.float32)
        self.comm.Neighbor_alltoallv(
            [send, (scounts, sdispls), MPI.FLOAT], [recv, (rcounts, rdispls), MPI.FLOAT]
        )
        self._count([b.nbytes for b in bufs])
        return self._split(recv, shapes, device)

    def free(self) -> None:
        self.comm.Free()
