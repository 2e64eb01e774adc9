"""Run under mpiexec: the workers-only group of ``Star`` opens, shares rows, closes.

Worker r (ranks 1..W) sends r rows filled with r; every worker must receive every
worker's rows in rank order, the server none. ``close`` frees the group (twice is
harmless) and a closed star refuses worker exchanges until the group is reopened.
"""

import numpy as np
from mpi4py import MPI

from fedsheaf.runtime.star import Star

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
star = Star(comm)
counts = [0, *range(1, size)]
expect = np.concatenate(
    [np.full((r, 2), r, np.float64) for r in range(1, size)] or [np.empty((0, 2))]
)

for _ in range(2):  # open, share, close; then again on a fresh group
    star.open_worker_group()
    got = star.allgather_workers(np.full((counts[rank], 2), rank, np.float64), "rows", counts)
    if star.is_server:
        assert got is None
    else:
        assert np.array_equal(got, expect), (rank, got)
    star.close()
    star.close()
    try:
        star.allgather_workers(np.empty((0, 2)), "rows", counts)
    except RuntimeError as err:
        assert "open_worker_group" in str(err)
    else:
        raise AssertionError("a closed star shared rows")

ok = comm.allreduce(1)
if rank == 0:
    print(f"star workers ok on {ok} ranks")
