"""Run under mpiexec: checks neighbour exchange on a fixed graph; exits 0 if all good.

Graph by world size: 1 → a single isolated rank; 2 → one edge; ≥4 → the path
0–1–2 plus ranks 3.. with zero degree. Rank r sends an (r+2) × 3 matrix (sizes
differ per neighbour) filled with r, and to neighbour j an (j+1) × 2 matrix
filled with 10r + j. The non-blocking forms are checked the same way, with both
collectives in flight at once, the sent tensor overwritten before the wait, and an
uneven delay between posting and waiting across ranks.
"""

import time

import numpy as np
import torch
from mpi4py import MPI

from fedsheaf.runtime.topology import Neighbourhood

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
edges = {1: [], 2: [(0, 1)]}.get(size, [(0, 1), (1, 2)])
nbrs = sorted({j for e in edges for j in e if rank in e and j != rank})
nb = Neighbourhood(comm, nbrs)
assert nb.neighbours == nbrs

got = nb.exchange(torch.full((rank + 2, 3), float(rank)))
for j, m in zip(nbrs, got, strict=True):
    assert m.shape == (j + 2, 3), (rank, j, m.shape)
    assert torch.all(m == j), (rank, j)

known = nb.exchange(np.full((rank + 2, 3), rank, np.float32), shapes=[(j + 2, 3) for j in nbrs])
assert all(torch.all(m == j) for j, m in zip(nbrs, known, strict=True))

each = nb.exchange_each([torch.full((j + 1, 2), float(10 * rank + j)) for j in nbrs])
for j, m in zip(nbrs, each, strict=True):
    assert m.shape == (rank + 1, 2), (rank, j, m.shape)
    assert torch.all(m == 10 * j + rank), (rank, j)

# bytes: payloads (+16-byte shape headers where shapes were not given)
expect = {j: 16 + (rank + 2) * 3 * 4 + (rank + 2) * 3 * 4 + 16 + (j + 1) * 2 * 4 for j in nbrs}
assert nb.bytes_total == expect, (nb.bytes_total, expect)
assert nb.take_round_bytes() == expect and sum(nb.take_round_bytes().values()) == 0

# non-blocking: post both, change the source tensor, work unevenly, then wait
own = torch.full((rank + 2, 3), float(rank))
one = nb.start_exchange(own, shapes=[(j + 2, 3) for j in nbrs])
each_pending = nb.start_exchange_each([torch.full((j + 1, 2), float(10 * rank + j)) for j in nbrs])
own.fill_(-1.0)  # the message is the value at posting time
time.sleep(0.05 * rank)
got = each_pending.wait()
for j, m in zip(nbrs, got, strict=True):
    assert m.shape == (rank + 1, 2) and torch.all(m == 10 * j + rank), (rank, j, m)
first = one.wait()
assert one.wait() is first  # a second wait returns the same matrices
for j, m in zip(nbrs, first, strict=True):
    assert m.shape == (j + 2, 3) and torch.all(m == j), (rank, j, m)
expect_nb = {j: (rank + 2) * 3 * 4 + 16 + (j + 1) * 2 * 4 for j in nbrs}  # one header
got_bytes = nb.take_round_bytes()
assert got_bytes == expect_nb, (got_bytes, expect_nb)

# a message too large to be sent when posted (1 MiB: rendezvous) is still the value at
# posting time, however late the receiver waits
big = torch.full((256, 1024), float(rank))
pending = nb.start_exchange(big, shapes=[(256, 1024)] * len(nbrs))
big.fill_(-1.0)
time.sleep(0.05 * (size - rank))
for j, m in zip(nbrs, pending.wait(), strict=True):
    assert torch.all(m == j), (rank, j, m.min())
nb.free()
ok = comm.allreduce(1)
if rank == 0:
    print(f"exchange ok on {ok} ranks")
