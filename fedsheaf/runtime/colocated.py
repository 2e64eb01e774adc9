"""Several agents on one rank: turn-taking threads, one MPI exchange per step for all.

When a graph run has fewer ranks than agents, each rank holds a block of agents
(:func:`fedsheaf.graphs.place_agents`). Every agent runs the unchanged algorithm loop in
its own thread, but only one thread runs at a time, in agent order (:class:`TurnTaking`):
an agent runs until it must meet the others (an exchange, its epoch record, the
checkpoint), then hands the turn to the next. When the rank's last agent arrives, it
does the meeting's work for all of them: for an exchange, the messages between agents
of this rank are handed over in memory and those to other ranks travel in one
neighbourhood collective over a distributed-graph communicator of ranks (an edge
between two ranks where any of their agents are neighbours), every co-located agent's
blocks in it. Each agent computes exactly what it would compute on a rank of its own,
from the same float32 messages, so the numbers do not depend on the placement.

Each agent sees an :class:`AgentPort` with the interface of
:class:`~fedsheaf.runtime.topology.Neighbourhood`; its byte counters count what the
algorithm sends along each graph edge (SPEC §2's formula, whatever the placement), and
:attr:`AgentGroup.mpi_bytes` what crossed MPI from this rank.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch
from mpi4py import MPI

from fedsheaf.graphs import Graph
from fedsheaf.runtime import heartbeat
from fedsheaf.runtime.topology import EdgePort, Neighbourhood, Shape, _as_buffer
from fedsheaf.util import memory
from fedsheaf.util.errors import CheckpointError

T = TypeVar("T")


class Abandoned(Exception):
    """Raised in an agent's thread when another agent of the rank failed: the thread ends
    quietly and the rank reports the first failure."""


class TurnTaking:
    """Run ``n`` threads one at a time, in order, meeting at :meth:`meet`.

    Thread ``k`` runs while it holds the turn. At :meth:`meet` it leaves its value and
    passes the turn on; the last thread calls ``finish(values)`` (every thread's value, in
    order), then every thread resumes, in order, with its part of the result.
    ``handover()``, if given, runs each time the turn passes from one thread to another
    (:class:`~fedsheaf.util.memory.FreedMemoryRelease`: ``train.release_memory``).
    """

    def __init__(self, n: int, handover: Callable[[], Any] | None = None) -> None:
        self.n = n
        self._handover = handover
        self._lock = threading.Lock()
        # one condition per thread, so that passing the turn wakes only the thread that
        # takes it (waking all n at each of n handovers cost 100 agents most of a step)
        self._woken = [threading.Condition(self._lock) for _ in range(n)]
        self._turn = 0
        self._values: list[Any] = [None] * n
        self._results: list[Any] = [None] * n
        self._met = 0  # meetings finished
        self.failure: BaseException | None = None

    def _wait_turn(self, k: int) -> None:
        self._woken[k].wait_for(lambda: self.failure is not None or self._turn == k)
        if self.failure is not None:
            raise Abandoned

    def start(self, k: int) -> None:
        """Block thread ``k`` until its first turn."""
        with self._lock:
            self._wait_turn(k)

    def meet(self, k: int, value: Any, finish: Callable[[list[Any]], list[Any]]) -> Any:
        """Leave ``value``; return thread ``k``'s part of ``finish(values)`` (see class)."""
        # An agent that reaches a meeting has made progress (the step watchdog): a rank
        # of many agents works through all their phases between two of its steps' ends.
        heartbeat.beat()
        with self._lock:
            self._values[k] = value
            if k < self.n - 1:
                self._pass_turn(k + 1)
                self._wait_turn(k)
                return self._results[k]
        results = finish(list(self._values))  # (outside the lock: this may wait on MPI)
        with self._lock:
            self._results = list(results)
            self._values = [None] * self.n
            self._met += 1
            self._pass_turn(0)
            if self.n > 1:
                self._wait_turn(k)
            return self._results[k]

    def _pass_turn(self, k: int) -> None:
        """Give thread ``k`` the turn (holding the lock; ``k = n`` after the last ends)."""
        if self._handover is not None and self._turn != k < self.n:
            self._handover()
        self._turn = k
        if k < self.n:
            self._woken[k].notify()

    def waiting(self) -> list[int]:
        """The threads that wait at a meeting the last thread has not reached."""
        with self._lock:
            return [k for k, v in enumerate(self._values) if v is not None]

    def done(self, k: int) -> None:
        """Thread ``k`` ended normally: the next one runs."""
        with self._lock:
            self._pass_turn(k + 1)

    def fail(self, exc: BaseException) -> None:
        """Thread failed with ``exc``: every other thread ends at its next turn."""
        with self._lock:
            if self.failure is None:
                self.failure = exc
            for woken in self._woken:
                woken.notify()


@dataclass
class _Deposit:
    """What one agent hands in for an exchange: one buffer per neighbour, the shapes it
    expects back (None: unknown, a header round tells), the device its results go to."""

    bufs: list[np.ndarray]
    shapes: list[Shape] | None
    device: torch.device | None


class _Pending:
    """A started exchange of an agent; :meth:`wait` meets the rank's other agents."""

    def __init__(self, run: Callable[[], list[torch.Tensor]]) -> None:
        self._run = run
        self._result: list[torch.Tensor] | None = None

    def wait(self) -> list[torch.Tensor]:
        if self._result is None:
            self._result = self._run()
        return self._result


class AgentPort(EdgePort):
    """One agent's neighbourhood on a shared rank (the interface of
    :class:`~fedsheaf.runtime.topology.Neighbourhood`, neighbours being agent ids)."""

    meets_other_agents = True

    def __init__(self, group: AgentGroup, slot: int, agent: int) -> None:
        super().__init__(group.graph.neighbours(agent))
        self.group, self.slot, self.agent = group, slot, agent

    def _start(
        self, bufs: list[np.ndarray], shapes: Sequence[Shape] | None, device: torch.device | None
    ) -> _Pending:
        # counted as a rank of its own would count it: the matrices, and the 16-byte shape
        # header per neighbour when the receiver does not know the shapes
        self._count([b.nbytes + (16 if shapes is None else 0) for b in bufs])
        deposit = _Deposit(bufs, None if shapes is None else list(shapes), device)
        return _Pending(lambda: self.group.exchange(self.slot, deposit))

    def start_exchange(
        self,
        mat: torch.Tensor | np.ndarray,
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> _Pending:
        """Send the same matrix to every neighbour; ``wait()`` returns theirs."""
        buf = _as_buffer(mat)
        return self._start([buf] * self.degree, shapes, device)

    def start_exchange_each(
        self,
        mats: Sequence[torch.Tensor | np.ndarray],
        shapes: Sequence[Shape] | None = None,
        device: torch.device | None = None,
    ) -> _Pending:
        """Send ``mats[k]`` to neighbour k; ``wait()`` returns what each sent to us."""
        if len(mats) != self.degree:
            raise ValueError(f"exchange_each needs {self.degree} matrices, got {len(mats)}")
        return self._start([_as_buffer(m) for m in mats], shapes, device)


class AgentGroup:
    """The agents of this rank, their ports, and the rank-level exchange.

    Parameters
    ----------
    comm:
        The communicator of the graph run's ranks (rank r holds ``placement[r]``).
    graph:
        The agent graph.
    placement:
        The agents of every rank (:func:`fedsheaf.graphs.place_agents`).
    handover:
        What runs each time an agent hands the turn to another (:class:`TurnTaking`).
    """

    def __init__(
        self,
        comm: MPI.Intracomm,
        graph: Graph,
        placement: Sequence[Sequence[int]],
        handover: Callable[[], Any] | None = None,
    ) -> None:
        self.graph, self.rank = graph, comm.Get_rank()
        self.agents = [int(i) for i in placement[self.rank]]
        self.owner = {int(i): r for r, block in enumerate(placement) for i in block}
        self._handover = handover
        self.turns = TurnTaking(len(self.agents), handover)
        self.ports = [AgentPort(self, k, i) for k, i in enumerate(self.agents)]
        mine = set(self.agents)
        # the pairs (i here, j there) of every edge to each other rank, in one order both
        # sides compute: messages i -> j travel in this order, j -> i in the mirrored one
        pairs: dict[int, list[tuple[int, int]]] = {}
        for i in self.agents:
            for j in graph.neighbours(i):
                if j not in mine:
                    pairs.setdefault(self.owner[j], []).append((i, j))
        self.peers = sorted(pairs)
        self.pairs = {r: sorted(pairs[r]) for r in self.peers}
        self.comm = comm.Create_dist_graph_adjacent(self.peers, self.peers, reorder=False)
        sources, destinations, _ = self.comm.Get_dist_neighbors()
        if list(sources) != self.peers or list(destinations) != self.peers:
            raise RuntimeError("MPI reordered the neighbour lists of the dist-graph communicator")
        self.slot = {i: k for k, i in enumerate(self.agents)}
        #: bytes this rank sent through MPI to each other rank (payload and shape headers)
        self.mpi_bytes = {r: 0 for r in self.peers}

    # ---- the exchange ------------------------------------------------------------
    def exchange(self, slot: int, deposit: _Deposit) -> list[torch.Tensor]:
        got: list[torch.Tensor] = self.turns.meet(
            slot,
            ("an exchange", deposit),
            lambda met: self._exchange_all(self._met("an exchange", met)),
        )
        return got

    def _met(self, point: str, values: list[tuple[str, Any]]) -> list[Any]:
        """The values the agents left at a meeting, each at ``point``; an algorithm that
        meets its neighbours at different points on different agents (an exchange some
        agents skip) is a bug, said here rather than mixing what they left."""
        if any(v is None or v[0] != point for v in values):
            said = ", ".join(
                f"agent {i} at " + ("the end of its run" if v is None else v[0])
                for i, v in zip(self.agents, values, strict=True)
            )
            raise RuntimeError(
                f"the agents of rank {self.rank} reached different points ({said}): every "
                "agent must exchange with its neighbours at the same points of the loop"
            )
        return [value for _, value in values]

    def _out(self, deposits: list[_Deposit], i: int, j: int) -> np.ndarray:
        port = self.ports[self.slot[i]]
        return deposits[self.slot[i]].bufs[port.neighbours.index(j)]

    def _exchange_all(self, deposits: list[_Deposit]) -> list[list[torch.Tensor]]:
        remote = self._remote(deposits)  # (collective: every rank takes part, even without peers)
        results = []
        for k, i in enumerate(self.agents):
            got = []
            for j in self.ports[k].neighbours:
                buf = remote[(j, i)] if (j, i) in remote else self._out(deposits, j, i).copy()
                t = torch.from_numpy(buf)
                got.append(t.to(deposits[k].device) if deposits[k].device is not None else t)
            results.append(got)
        return results

    def _expected(self, deposits: list[_Deposit], j: int, i: int) -> Shape:
        """The shape agent ``i`` (here) said it expects from neighbour ``j``."""
        shapes = deposits[self.slot[i]].shapes
        assert shapes is not None
        return shapes[self.ports[self.slot[i]].neighbours.index(j)]

    def _remote(self, deposits: list[_Deposit]) -> dict[tuple[int, int], np.ndarray]:
        """One neighbourhood collective over the ranks (after a header round when some
        agent here did not say the shapes it expects): every message ``j -> i`` from an
        agent ``j`` of another rank to an agent ``i`` of this one, by ``(j, i)``."""
        sending = {r: [self._out(deposits, i, j) for i, j in self.pairs[r]] for r in self.peers}
        # (both sides order a rank-edge's messages by (sender, receiver))
        incoming = {r: sorted((j, i) for i, j in self.pairs[r]) for r in self.peers}
        known = all(d.shapes is not None for d in deposits)
        if known:
            shapes = {
                r: [self._expected(deposits, j, i) for j, i in incoming[r]] for r in self.peers
            }
        else:
            shapes = self._shape_round(sending, incoming)
        send = [b.ravel() for r in self.peers for b in sending[r]]
        scounts = [sum(b.size for b in sending[r]) for r in self.peers]
        rcounts = [sum(int(s[0]) * int(s[1]) for s in shapes[r]) for r in self.peers]
        recv = np.empty(sum(rcounts), dtype=np.float32)
        sendbuf = np.concatenate(send) if send else np.empty(0, np.float32)
        with heartbeat.waiting():
            self.comm.Neighbor_alltoallv(
                [sendbuf, (scounts, _displs(scounts)), MPI.FLOAT],
                [recv, (rcounts, _displs(rcounts)), MPI.FLOAT],
            )
        for r, n in zip(self.peers, scounts, strict=True):
            self.mpi_bytes[r] += 4 * n
        out, offset = {}, 0
        for r in self.peers:
            for pair, shape in zip(incoming[r], shapes[r], strict=True):
                rows, cols = shape
                out[pair] = recv[offset : offset + rows * cols].reshape(rows, cols)
                offset += rows * cols
        return out

    def _shape_round(
        self, sending: dict[int, list[np.ndarray]], incoming: dict[int, list[tuple[int, int]]]
    ) -> dict[int, list[Shape]]:
        """The shapes of the messages to come, from their senders (int64 rows, cols)."""
        head = [np.array(b.shape, dtype=np.int64) for r in self.peers for b in sending[r]]
        scounts = [2 * len(sending[r]) for r in self.peers]
        rcounts = [2 * len(incoming[r]) for r in self.peers]
        recv = np.empty(sum(rcounts), dtype=np.int64)
        sendbuf = np.concatenate(head) if head else np.empty(0, np.int64)
        with heartbeat.waiting():
            self.comm.Neighbor_alltoallv(
                [sendbuf, (scounts, _displs(scounts)), MPI.INT64_T],
                [recv, (rcounts, _displs(rcounts)), MPI.INT64_T],
            )
        for r, n in zip(self.peers, scounts, strict=True):
            self.mpi_bytes[r] += 8 * n
        out, offset = {}, 0
        for r in self.peers:
            out[r] = [
                (int(recv[offset + 2 * k]), int(recv[offset + 2 * k + 1]))
                for k in range(len(incoming[r]))
            ]
            offset += 2 * len(incoming[r])
        return out

    # ---- other meetings ----------------------------------------------------------
    def once(self, slot: int, point: str, value: T, finish: Callable[[list[T]], Any]) -> Any:
        """Meet the rank's other agents at ``point`` (words: "the epoch's end"); the last
        calls ``finish(values)`` once, and every agent gets its return value."""
        return self.turns.meet(
            slot, (point, value), lambda met: [finish(self._met(point, met))] * len(met)
        )

    def run(self, bodies: Sequence[Callable[[], None]]) -> None:
        """Run ``bodies[k]`` (agent k's whole training) in turn-taking threads; re-raise
        the first failure here, in the calling thread, once every thread has ended."""

        # (a group runs twice: build, train)
        self.turns = TurnTaking(len(self.agents), self._handover)

        def main(k: int) -> None:
            try:
                self.turns.start(k)
                bodies[k]()
                waiting = self.turns.waiting() if k == len(bodies) - 1 else []
                if waiting:  # (the others would wait for ever)
                    said = ", ".join(str(self.agents[w]) for w in waiting)
                    raise RuntimeError(
                        f"agent {self.agents[k]} ended its run while agents {said} of rank "
                        f"{self.rank} wait for it at a meeting: every agent must exchange "
                        "with its neighbours at the same points of the loop"
                    )
                self.turns.done(k)
            except Abandoned:
                pass
            except BaseException as exc:  # handed to the calling thread, raised there
                self.turns.fail(exc)

        threads = [
            threading.Thread(target=main, args=(k,), name=f"agent-{i}", daemon=True)
            for k, i in enumerate(self.agents)
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)  # (a timeout keeps the main thread open to signals)
        if self.turns.failure is not None:
            raise self.turns.failure

    def free(self) -> None:
        self.comm.Free()


def _displs(counts: Sequence[int]) -> list[int]:
    out, total = [], 0
    for c in counts:
        out.append(total)
        total += c
    return out


class _GroupReporter:
    """An agent's reporter on a shared rank: the rank's records go on together, once
    every agent of the rank has given its own."""

    def __init__(self, group: AgentGroup, slot: int, report: Callable[[list[Any]], None]) -> None:
        self.group, self.slot, self.report = group, slot, report

    def epoch(self, record: dict[str, Any]) -> None:
        self.group.once(self.slot, "its epoch record", record, self.report)


class LocalAgents:
    """The agents this rank holds, and what differs between one and several of them.

    One agent on a rank of its own talks through a
    :class:`~fedsheaf.runtime.topology.Neighbourhood` of graph neighbours (rank = agent
    id). Several share an :class:`AgentGroup`. Either way the caller builds one algorithm
    per :attr:`ids` entry with the matching :attr:`nbrs` and :attr:`reporters`.

    Parameters
    ----------
    comm:
        The graph run's ranks.
    graph, placement:
        The agent graph and every rank's agents (:func:`fedsheaf.graphs.place_agents`).
    report:
        What takes this rank's epoch records (a list, in agent order) once all are in,
        with the bytes the rank sent through MPI since its last report.
    release_memory:
        Several agents: hand the memory the rank freed back to the OS between their
        turns (``train.release_memory``; :class:`~fedsheaf.util.memory.FreedMemoryRelease`).
    """

    def __init__(
        self,
        comm: MPI.Intracomm,
        graph: Graph,
        placement: Sequence[Sequence[int]],
        report: Callable[[list[Any], int], None],
        release_memory: bool = False,
    ) -> None:
        rank = comm.Get_rank()
        self.ids = [int(i) for i in placement[rank]]
        self.shared = len(placement) < graph.n
        self.group: AgentGroup | None = None
        self._mpi_reported = 0

        def rank_report(records: list[Any]) -> None:
            sent = self.mpi_bytes()
            report(records, sent - self._mpi_reported)
            self._mpi_reported = sent

        if self.shared:
            memory.share_malloc_arena()  # (before the agents' threads start)
            release = memory.FreedMemoryRelease() if release_memory else None
            self.group = AgentGroup(comm, graph, placement, release)
            self.nbrs: list[Any] = list(self.group.ports)
            self.reporters: list[Any] = [
                _GroupReporter(self.group, k, rank_report) for k in range(len(self.ids))
            ]
        else:
            assert self.ids == [rank], "one agent per rank: rank r holds agent r"
            self.nbrs = [Neighbourhood(comm, graph.neighbours(rank))]
            self.reporters = [_OneReporter(rank_report)]

    def build(self, make: Callable[[int, Any, Any], T]) -> list[T]:
        """``make(agent id, nbr, reporter)`` for every agent of this rank, in agent order.

        Several agents build in turn-taking threads, as they train: a constructor may
        exchange with its neighbours (Sheaf-FMTL swaps its parameter counts), which meets
        the rank's other agents."""
        if self.group is None:
            return [make(self.ids[0], self.nbrs[0], self.reporters[0])]
        built: list[Any] = [None] * len(self.ids)

        def body(k: int) -> None:
            built[k] = make(self.ids[k], self.nbrs[k], self.reporters[k])

        self.group.run([partial(body, k) for k in range(len(self.ids))])
        return built

    def run(self, algos: Sequence[Any], first_epoch: int, after_epoch: Any) -> None:
        """Train every agent from epoch ``first_epoch + 1``; ``after_epoch(n)`` runs once
        per rank after epoch ``n`` (the checkpoint), when every agent has finished it."""
        if self.group is None:
            algos[0].run(first_epoch, after_epoch)
            return
        group = self.group

        def hook(k: int) -> Callable[[int], None] | None:
            if after_epoch is None:
                return None
            return lambda n: group.once(k, "the checkpoint", n, lambda done: after_epoch(done[0]))

        hooks = [hook(k) for k in range(len(algos))]
        group.run([partial(a.run, first_epoch, h) for a, h in zip(algos, hooks, strict=True)])

    def state(self, algos: Sequence[Any]) -> dict[str, Any]:
        """This rank's part of a checkpoint: each agent's algorithm state and byte totals
        (one agent on its own rank: the format of one agent per rank, unchanged)."""
        if self.group is None:
            return {
                "algorithm": algos[0].state_dict(),
                "bytes_total": dict(self.nbrs[0].bytes_total),
            }
        return {
            "agents": {
                i: {"algorithm": a.state_dict(), "bytes_total": dict(n.bytes_total)}
                for i, a, n in zip(self.ids, algos, self.nbrs, strict=True)
            }
        }

    def load(self, algos: Sequence[Any], state: dict[str, Any]) -> None:
        """Install what :meth:`state` saved (either format) on every agent."""
        for i, a, n in zip(self.ids, algos, self.nbrs, strict=True):
            own = agent_state(state, i)
            a.load_state_dict(own["algorithm"])
            n.bytes_total = {int(j): int(v) for j, v in own["bytes_total"].items()}
        self._mpi_reported = self.mpi_bytes()  # (sent by earlier launches: reported then)

    def mpi_bytes(self) -> int:
        """Bytes this rank sent through MPI (one agent per rank: all it sent, earlier
        launches included; several: what this launch's rank-level exchanges sent)."""
        if self.group is None:
            return sum(self.nbrs[0].bytes_total.values())
        return sum(self.group.mpi_bytes.values())

    def free(self) -> None:
        (self.group or self.nbrs[0]).free()


class _OneReporter:
    def __init__(self, report: Callable[[list[Any]], None]) -> None:
        self.report = report

    def epoch(self, record: dict[str, Any]) -> None:
        self.report([record])


def agent_state(state: dict[str, Any], agent: int) -> dict[str, Any]:
    """Agent ``agent``'s part of a rank's checkpoint state: ``state["agents"][agent]``
    when the rank held several, else the state itself (a rank of its own)."""
    if "agents" in state:
        if agent not in state["agents"]:  # (read_agents assembles what each rank needs)
            raise CheckpointError(f"the checkpoint read does not hold agent {agent}")
        part: dict[str, Any] = state["agents"][agent]
        return part
    return state
