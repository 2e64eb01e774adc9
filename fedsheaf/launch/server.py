"""Run a server-based algorithm (SPEC §4): rank 0 serves, ranks 1..W host the clients.

All ranks execute the same round loop (SPMD); the server's extra work is
sampling, averaging and recording. One round::

    server samples clients S_t (seeded)          -> Bcast client ids
    every rank places S_t on the workers         (the same placement everywhere)
    each rank trains its placed clients in turn  -> Gatherv their shared vectors
    [dynamic: the server deals clients to workers as they ask -> Send/Irecv]
    [balanced/dynamic: workers swap the new private states -> Iallgatherv]
    server aggregates them (in client-id order)  -> Bcast the new shared vector
    every client evaluates on its local test set -> Gatherv (client, correct, total, loss)

After the last round, if the algorithm has a final schedule, every client runs
it once (e.g. head fine-tuning, nothing uploaded) and is evaluated again.
Aggregating in client-id order makes results independent of the rank count. The
server's rule is ``federated.aggregator``
(:mod:`fedsheaf.algorithms.federated.aggregators`; FedAvg's float64 mean by default).

*Placement* (``federated.placement``). Client c's home is rank 1 + c mod W: it is
evaluated, fine-tuned in the final round and checkpointed there. ``static``
trains it there too, so an unlucky sample (4/3/2/1 clients on 4 workers) leaves
the round to the busiest rank. ``dynamic`` (the default) decides while the round
runs: the server hands the sampled clients out one at a time, longest first (by
training samples), to whichever worker asks; a worker asks again when it has
trained one, and the server then tells every rank where each client trained (one
Bcast). Measured time balances the round, so a client that trains slowly for a
reason its size does not show (a slower core, a busy neighbour) holds up only its
own worker. ``balanced`` deals the same order ahead of time, each client to the
worker with the fewest samples so far
(:func:`~fedsheaf.algorithms.federated.protocol.balanced_placement`), the same deal
on every rank. For both, every worker loads every client's data (derived from the
seed, as the home ranks' are) and, after each round's training, the workers send
each other the trained clients' new private parameters, so every worker holds
every client's current state; the server learns the clients' sizes once before
round 1. These exchanges are counted under the kind ``placement``, outside
``bytes_up`` and ``bytes_down`` (simulation plumbing, not federated traffic). A
client's training depends only on (seed, client, round), the shared vector and its
state, so all placements give bitwise the same results (every rank runs the same number
of torch threads, :func:`~fedsheaf.runtime.world.init_world`).

*Bytes.* A round's ``bytes_up`` and ``bytes_down`` are the federated protocol's traffic,
counted per client as SPEC §4 describes it, whatever the rank count: down, the shared
vector to each client that trains in the round (every client in the final round), up,
the shared vectors the trained clients return, and head-only FedAvg's one exchange of
moments before round 1 (each client's up, Σ_cen back to each, in round 1's record). The
simulation's own messages (client ids, sizes and losses, evaluation rows, placement)
are left out. ``bytes`` holds what MPI moved by kind, from the server's side: there a
broadcast counts once per worker rank (:class:`~fedsheaf.runtime.star.Star`).

Every ``checkpoint.every`` rounds (and after the last) each rank saves its state (the server: the
shared vector, the history, its byte counters, the task's server state, e.g.
head-only FedAvg's Gram recursion, and its aggregator's, e.g. FedAdam's moments; a
worker: its home clients' private parameters)
with :mod:`fedsheaf.rundir.checkpoint`'s protocol, and ``checkpoint.resume`` continues
from the newest complete checkpoint. Client sampling, batch order and
augmentation derive from (seed, client, round), so no generator state needs
saving.

What is trained and how it is scored comes from the algorithm's *task*
(:mod:`fedsheaf.algorithms.federated.task`): data, model, local solver,
evaluation rows and summary. A task may also ask for one exchange before the
first round (client rows -> Gatherv, server reply -> Bcast; head-only FedAvg's
target moments) and add server-side metrics after each aggregation.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.aggregators import (
    aggregator_state,
    describe_aggregator,
    load_aggregator_state,
    make_aggregator,
)
from fedsheaf.algorithms.federated.protocol import (
    client_rank,
    dispatch_order,
    hosted_clients,
    moves_clients,
    place_clients,
    rows_per_rank,
    sample_clients,
)
from fedsheaf.algorithms.federated.task import Task
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import RunDir
from fedsheaf.rundir.lifecycle import (
    checkpointer,
    follow_run_dir,
    load_latest,
    open_run_dir,
    settle_config,
)
from fedsheaf.rundir.preflight import describe_server_run, fingerprint_data, per_round
from fedsheaf.rundir.tensorboard import Board
from fedsheaf.runtime.star import NO_CLIENT, SERVER, Star
from fedsheaf.runtime.world import World, note_role
from fedsheaf.util import memory
from fedsheaf.util.errors import CheckpointError, ConfigError
from fedsheaf.util.log import CHOSEN, get_logger
from fedsheaf.util.units import count, human_bytes

logger = get_logger(__name__)

#: Byte-counter kind of the runtime's own exchanges (placement).
PLUMBING = "placement"
#: Byte-counter kinds of the federated protocol's uploads (the gathers count them per client).
PROTOCOL_UP = ("params_up", "setup_up")


class Rounds:
    """The round loop, run by every rank; the server also records."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        star: Star,
        runner: ClientRunner,
        run_dir: RunDir | None,
        task: Task,
        aggregator: Any = None,
    ) -> None:
        self.cfg, self.fc = cfg, cfg.federated
        #: the server's aggregator (``federated.aggregator``; None on the workers)
        if aggregator is None and star.is_server:
            aggregator = make_aggregator(self.fc)
        self.aggregator = aggregator
        self.star, self.runner, self.run_dir, self.task = star, runner, run_dir, task
        self.home = runner.home
        self.moves = moves(cfg, star.n_workers)
        self.replicates = self.moves and runner.private_size > 0
        self.work: np.ndarray | None = None  # every client's training samples (if moves)
        self.size = runner.shared.size
        self.history: list[dict[str, Any]] = []
        self.w: np.ndarray | None = None  # the shared vector after the rounds done so far
        self.rounds_done = 0
        self._resumed: dict[str, Any] | None = None
        #: protocol bytes of the setup's reply (head-only FedAvg's Σ_cen to every client)
        self._setup_down = 0
        #: the server's TensorBoard writer (``output.tensorboard=true``)
        self.board: Board | None = None

    # ---- checkpoints ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state after ``rounds_done`` rounds (for fedsheaf.rundir.checkpoint)."""
        state: dict[str, Any] = {"runner": self.runner.state_dict(), "bytes": dict(self.star.bytes)}
        if self.star.is_server and self.w is not None:
            state.update(
                w=torch.from_numpy(self.w.copy()),
                history=self.history,
                task=self.task.server_state(),
                aggregator=aggregator_state(self.aggregator),
            )
        return state

    def load_state_dict(self, state: dict[str, Any], rounds_done: int) -> None:
        """Continue after ``rounds_done`` rounds from what :meth:`state_dict` returned."""
        if rounds_done > self.fc.rounds:
            raise ConfigError(
                f"config key 'federated.rounds': the checkpoint is after round {rounds_done}, "
                f"but the run has only {self.fc.rounds} rounds"
            )
        if self.star.is_server and state["w"].numel() != self.size:
            raise CheckpointError(
                f"the checkpoint's shared vector has {state['w'].numel()} values, "
                f"this model shares {self.size}"
            )
        if self.star.is_server:
            self._check_history(state["history"])
            self._check_scored_rounds(state["history"])
        self.runner.load_state_dict(state["runner"])
        self.rounds_done, self._resumed = rounds_done, state
        if self.star.is_server:
            self.history = list(state["history"])

    def _check_history(self, history: list[dict[str, Any]]) -> None:
        """Refuse a checkpoint whose rounds trained another number of clients than this
        algorithm does (a Local run begun when Local still sampled its clients)."""
        expected = per_round(self.cfg)
        for record in history:
            trained = len(record.get("selected", []))
            if not record.get("final") and trained != expected:
                raise ConfigError(
                    f"cannot resume: round {record['round']} of this run trained "
                    f"{count(trained, 'client')}, but {self.cfg.algorithm} trains "
                    f"{expected} per round (Local trains every client since fedsheaf "
                    "stopped sampling for it); start the run over with output.overwrite=true"
                )

    def _check_scored_rounds(self, history: list[dict[str, Any]]) -> None:
        """Refuse a length whose last ``eval_last`` rounds (always evaluated: the score window,
        and the last evaluation that head-only FedAvg reports) reach back to checkpointed
        rounds that were not evaluated: a run shortened on resume, to near where it stopped,
        would report fewer or older evaluations than it says."""
        fc = self.fc
        window = range(max(1, fc.rounds - fc.eval_last + 1), fc.rounds + 1)
        missing = checkpoint.unevaluated(history, window, "round", self.task.eval_key)
        if missing:
            done = max(r["round"] for r in history if not r.get("final"))
            where = self.run_dir.path if self.run_dir is not None else "the run"
            which = (
                f"round {missing[0]} among them was"
                if len(missing) == 1
                else f"rounds {', '.join(map(str, missing))} among them were"
            )
            raise CheckpointError(
                f"cannot end {where} after round {fc.rounds}: a run of that length evaluates "
                f"its last {count(fc.eval_last, 'round')} (federated.eval_last), and {which} "
                "trained without an evaluation (the run was longer then); resume with "
                f"federated.rounds >= {done + fc.eval_last}"
            )

    def _resume(self, w: np.ndarray) -> np.ndarray:
        """The checkpoint's shared vector on every rank; byte counters as they were."""
        state, server = self._resumed, self.star.is_server
        assert state is not None
        w = self.star.bcast(state["w"].numpy().astype(w.dtype) if server else w, "params")
        if self.replicates:  # each worker restored its home clients: share them
            self._share_states(
                {c: client_rank(c, self.star.n_workers) for c in range(self.fc.clients)}
            )
        self.star.bytes = Counter(state["bytes"])
        if server:
            self.task.load_server_state(state.get("task", {}))
            load_aggregator_state(self.aggregator, state.get("aggregator", {}))
        self._resumed = None
        return w

    # ---- the protocol -----------------------------------------------------------
    def run(self, after_round: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """Rounds ``rounds_done+1 .. rounds`` (then the final round); ``after_round(t)``
        runs on every rank once round ``t`` is recorded (the checkpoint hook)."""
        fc, star, server = self.fc, self.star, self.star.is_server
        fraction, selected = self.runner.algorithm.participation(), per_round(self.cfg)
        init = self.runner.shared.flatten(self.runner.model)
        w = star.bcast(init, "params")  # everyone starts from the server's parameters
        self._setup(w)
        self._placement_setup()
        if self._resumed is not None:
            w = self._resume(w)
        for t in range(self.rounds_done, fc.rounds):
            start = time.perf_counter()
            sel = star.bcast(
                sample_clients(fc.clients, fraction, self.cfg.seed, t)
                if server
                else np.empty(selected, dtype=np.int64),
                "control",
            )
            where, mine, updates = self._train(sel, w, t)
            info = self._info(mine, [loss for _, loss in updates])
            counts = rows_per_rank(sel, star.n_workers, where) if server else None
            got_info = star.gather(info, "control", counts)
            order = _client_order(got_info)  # the server's: rows arrive as workers trained
            if server:
                assert got_info is not None  # (the workers' gather returns None)
                got_info = got_info[order]
            extra: dict[str, Any] = {}
            if self.size:
                vecs = np.stack([v for v, _ in updates]) if updates else self._no_rows()
                got = star.gather(vecs, "params", counts)
                if self.replicates:  # the workers, while the server averages
                    self._share_states(where)
                if server:
                    assert got is not None and got_info is not None
                    got = got[order]
                    w_new = self._aggregate(w, got, got_info, t + 1)
                    extra = self.task.server_round(t, w, got, got_info, w_new)
                else:
                    w_new = None
                w = star.bcast(w_new if w_new is not None else np.empty_like(w), "params")
            elif self.replicates:
                self._share_states(where)
            trained = time.perf_counter() - start
            record: dict[str, Any] = {"round": t + 1, "final": False}
            if self._evaluates(t):
                record.update(self._evaluate(w) or {})
            if server:
                record["selected"] = [int(c) for c in sel]
                record.update(extra)
                down = len(sel) * w.nbytes + (self._setup_down if t == 0 else 0)
                assert got_info is not None
                self._record(record, got_info, start, trained, down)
            self.w, self.rounds_done = w, t + 1
            if after_round is not None:
                after_round(t + 1)
        if self.runner.algorithm.has_final_round:
            self._final_round(w)
        return self.history

    def _final_round(self, w: np.ndarray) -> None:
        start = time.perf_counter()
        r = self.fc.rounds
        losses = [self.runner.final_update(c, w, r) for c in self.home]
        counts = rows_per_rank(range(self.fc.clients), self.star.n_workers)
        got_info = self.star.gather(
            self._info(self.home, losses), "control", counts if self.star.is_server else None
        )
        trained = time.perf_counter() - start
        record: dict[str, Any] = {"round": r + 1, "final": True}
        record.update(self._evaluate(w) or {})
        if self.star.is_server:
            assert got_info is not None
            got_info = got_info[_client_order(got_info)]
            self._record(record, got_info, start, trained, self.fc.clients * w.nbytes)

    # ---- pieces -------------------------------------------------------------------
    def _setup(self, w0: np.ndarray) -> None:
        """The task's one exchange before the first round, if it has one."""
        task, star = self.task, self.star
        if not task.setup_width:
            return
        counts = rows_per_rank(range(self.fc.clients), star.n_workers)
        got = star.gather(task.setup_rows(self.runner), "setup", counts if star.is_server else None)
        if got is not None:
            got = got[np.argsort(got[:, 0], kind="stable")]
        reply = task.server_setup(got, w0) if got is not None else None
        reply = star.bcast(reply if reply is not None else np.empty(task.setup_reply_size), "setup")
        self._setup_down = self.fc.clients * reply.nbytes
        task.receive_setup(self.runner, reply)

    def _placement_setup(self) -> None:
        """Balanced placement: the server learns every client's size (one Gatherv of
        ``[client, n_train]`` from the home ranks); the workers know them already."""
        if not self.moves:
            return
        star, n = self.star, self.fc.clients
        if self.replicates:
            star.open_worker_group()
        rows = np.asarray(
            [[c, self.runner.clients[c].n_train] for c in self.home], dtype=np.float64
        ).reshape(-1, 2)
        counts = rows_per_rank(range(n), star.n_workers)
        got = star.gather(rows, PLUMBING, counts if star.is_server else None)
        if got is not None:
            self.work = np.zeros(n)
            self.work[got[:, 0].astype(np.int64)] = got[:, 1]
        else:
            self.work = np.asarray([self.runner.clients[c].n_train for c in range(n)], float)

    def _place(self, sel: np.ndarray) -> dict[int, int]:
        """Client -> the rank that trains it this round (the same on every rank)."""
        if not self.moves:
            return place_clients(sel, self.star.n_workers, "static")
        return place_clients(sel, self.star.n_workers, "balanced", self.work)

    def _train(
        self, sel: np.ndarray, w: np.ndarray, t: int
    ) -> tuple[dict[int, int], list[int], list[tuple[np.ndarray, float]]]:
        """Train this rank's share of ``sel``: (client -> rank for all of ``sel``,
        the clients this rank trained, their updates in that order)."""
        star, update = self.star, self.runner.local_update
        if not (self.moves and self.fc.placement == "dynamic"):
            where = self._place(sel)
            mine = [int(c) for c in sel if where[int(c)] == star.rank]
            return where, mine, [update(c, w, t) for c in mine]
        mine, updates = [], []
        if star.is_server:
            assert self.work is not None
            dealt = star.deal(dispatch_order(sel, self.work), PLUMBING)
            ranks = np.asarray([dealt[int(c)] for c in sel], dtype=np.int64)
        else:
            while (c := star.ask(PLUMBING)) != NO_CLIENT:
                mine.append(c)
                updates.append(update(c, w, t))
            ranks = np.empty(len(sel), dtype=np.int64)
        ranks = star.bcast(ranks, PLUMBING)  # where each client trained, for every rank
        return dict(zip((int(c) for c in sel), ranks.tolist(), strict=True)), mine, updates

    def _share_states(self, where: dict[int, int]) -> None:
        """Every worker gets the private state of each client in ``where`` from the
        rank ``where`` names (rows in rank order, client-id order within a rank)."""
        star, runner = self.star, self.runner
        by_rank = [sorted(c for c, r in where.items() if r == rank) for rank in range(star.size)]
        rows = runner.private_rows(by_rank[star.rank])
        got = star.allgather_workers(rows, PLUMBING, [len(cs) for cs in by_rank])
        if got is None:
            return
        order = [c for cs in by_rank for c in cs]
        others = [i for i, c in enumerate(order) if where[c] != star.rank]
        runner.load_private_rows([order[i] for i in others], got[others])

    def _no_rows(self) -> np.ndarray:
        return np.empty((0, self.size), dtype=np.float32)

    def _info(self, clients: list[int], losses: list[float]) -> np.ndarray:
        rows = [
            [c, self.runner.clients[c].n_train, loss]
            for c, loss in zip(clients, losses, strict=True)
        ]
        return np.asarray(rows, dtype=np.float64).reshape(-1, 3)

    def _aggregate(
        self, w: np.ndarray, vecs: np.ndarray, info: np.ndarray, round_: int
    ) -> np.ndarray:
        """The new shared vector (float32) from the uploads ``vecs`` (rows in client-id
        order, ``info``'s) and the vector ``w`` the clients started from: the
        aggregator's (``federated.aggregator``; fedavg: the float64 mean in that order)."""
        counts = [int(n) for n in info[:, 1]]
        out = self.aggregator.aggregate(w, list(vecs), counts, round_)
        try:
            new = np.asarray(out, dtype=np.float64)  # (float32 -> float64 -> float32: exact)
        except (TypeError, ValueError):
            new = None
        if new is None or new.shape != w.shape:
            shape = "" if new is None else f" of shape {new.shape}"
            raise ConfigError(
                f"config key 'federated.aggregator': {self.fc.aggregator!r} returned a "
                f"{type(out).__name__}{shape} in round {round_}, expected a flat vector of "
                f"{w.size} numbers"
            )
        return new.astype(w.dtype)

    def _evaluates(self, t: int) -> bool:
        fc = self.fc
        return (t + 1) % fc.eval_every == 0 or t >= fc.rounds - fc.eval_last

    def _evaluate(self, w: np.ndarray) -> dict[str, Any] | None:
        rows = [[c, *self.task.evaluate(self.runner, c, w)] for c in self.home]
        mine = np.asarray(rows, dtype=np.float64).reshape(-1, 1 + self.task.eval_width)
        counts = rows_per_rank(range(self.fc.clients), self.star.n_workers)
        got = self.star.gather(mine, "metrics", counts if self.star.is_server else None)
        return self.task.round_record(got) if got is not None else None

    def _record(
        self, record: dict[str, Any], info: np.ndarray, start: float, trained: float, down: int
    ) -> None:
        """Server: complete ``record`` from ``info`` (rows in client-id order; ``down``: the
        round's protocol bytes down) and write it."""
        by_kind = self.star.take_bytes()
        record.update(
            loss=float(np.nanmean(info[:, 2])) if info.shape[0] else float("nan"),
            seconds=time.perf_counter() - start,
            train_seconds=trained,
            bytes_up=sum(by_kind.get(k, 0) for k in PROTOCOL_UP),
            bytes_down=down,
            bytes=by_kind,
        )
        if self.run_dir is not None:
            self.run_dir.append_metrics(record)
        if self.board is not None:
            self.board.write(record)
        self.history.append(record)
        where = "final round" if record["final"] else f"round {record['round']:>4}/{self.fc.rounds}"
        msg = f"{where}  loss {record['loss']:.4f}" + self.task.progress(record)
        msg += (
            f"  {record['seconds']:.1f}s  up {human_bytes(record['bytes_up'], compact=True)}"
            f"  down {human_bytes(record['bytes_down'], compact=True)}"
        )
        logger.info(msg, extra=CHOSEN)  # (the server: rank 0)


def _client_order(info: np.ndarray | None) -> np.ndarray | None:
    """The server's order of gathered ``[client, ...]`` rows by client id (None elsewhere):
    what it averages, records and hands the task does not depend on who trained whom."""
    return None if info is None else np.argsort(info[:, 0], kind="stable")


def run_server_based(cfg: ExperimentConfig, world: World) -> dict[str, Any] | None:
    """Run ``cfg.algorithm`` with clients spread over ranks 1..W; rank 0 returns the summary."""
    fc = cfg.federated
    algorithm = FEDERATED[cfg.algorithm](fc)
    task = algorithm.make_task(cfg)
    world.agree(lambda: task.check(world.size))
    aggregator = world.agree(lambda: make_aggregator(fc), root_only=True)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    digest = world.agree(
        lambda: fingerprint_data(cfg, task.fingerprint(), run_path), root_only=True
    )
    star = Star(world.comm)
    note_role(SERVER, "the server")  # (named so where the job's last words name it)
    runner = build_runner(cfg, world, task, star)
    run_dir = world.agree(lambda: open_run_dir(cfg, run_path), root_only=True)
    rounds = Rounds(cfg, star, runner, run_dir, task, aggregator)
    per_rank = -(-fc.clients // star.n_workers)
    moved = rounds.moves
    placed = (
        f"{fc.placement} placement (every worker holds every client)"
        if moved
        else "static placement"
    )
    run = describe_server_run(
        cfg, star.n_workers, task.describe(), f" (up to {per_rank} per rank), {placed}"
    )
    world.log(
        f"fedsheaf: {run}; "
        f"{algorithm.describe()}; {runner.shared.size} shared parameters "
        f"({human_bytes(runner.shared.nbytes, compact=True)}); "
        f"device {world.device}, {count(world.threads, 'thread')} per rank, seed {cfg.seed}"
    )
    plain = (fc.aggregator, fc.aggregator_args, fc.prox_mu) == ("fedavg", {}, 0.0)
    if not plain and runner.shared.size:
        prox = f"; FedProx μ = {fc.prox_mu:g} on the clients" if fc.prox_mu else ""
        world.log(f"fedsheaf: server aggregator {describe_aggregator(fc)}{prox}")
    clock = checkpoint.WallClock()
    if cfg.checkpoint.resume:  # (a refusal here comes before "writing")
        clock.resumed(restore(world, run_path, rounds))
    if run_dir is not None:
        world.log(f"fedsheaf: writing {run_dir.path}")
        settle_config(run_dir, cfg)
        if cfg.output.tensorboard:  # (after the restore: metrics.jsonl cut to the checkpoint)
            rounds.board = Board(run_dir.path, "round", rounds.rounds_done + 1, rounds.history)
    world.barrier()  # an earlier launch's failed.json is gone before any rank may write one
    follow_run_dir(run_path)

    def state() -> dict[str, Any]:
        out = rounds.state_dict()
        if world.is_root:
            out[clock.KEY] = clock.total()
        return out

    try:
        history = rounds.run(checkpointer(cfg, world, run_path, state, digest))
    finally:
        if rounds.board is not None:
            rounds.board.close()
    star.close()
    elapsed = clock.stop()
    peaks = world.peak_memory()
    if not world.is_root or run_dir is None or peaks is None:
        return None
    summary: dict[str, Any] = {
        "name": cfg.name,
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "n_clients": fc.clients,
        "n_workers": star.n_workers,
        "placement": fc.placement if moved else "static",  # what ran (see moves_clients)
        "shared": algorithm.shared,
        "shared_params": runner.shared.size,
        "schedule": algorithm.describe(),
        **task.summarize(history),
        "wall_seconds": elapsed,
        "threads_per_rank": world.threads,
        "bytes_up_total": sum(r["bytes_up"] for r in history),
        "bytes_down_total": sum(r["bytes_down"] for r in history),
        "memory": peaks,  # rank 0: the server
    }
    run_dir.write_summary(summary)
    world.log("\n" + task.result_table(summary))
    world.log(memory.describe(summary["memory"]))
    world.log(f"[{clock.describe()}; results in {run_dir.path}]")
    return summary


def moves(cfg: ExperimentConfig, n_workers: int) -> bool:
    """Whether this run's placement may train a client away from its home rank."""
    fc = cfg.federated
    return moves_clients(fc.placement, n_workers, fc.clients, per_round(cfg))


def build_runner(cfg: ExperimentConfig, world: World, task: Task, star: Star) -> ClientRunner:
    """This rank's clients' data, on its device, and the runner that trains them.

    A worker loads its home clients, or every client when the placement may move
    clients (dynamic or balanced, ``1 < W < clients``); the server loads none.
    """
    fc = cfg.federated
    home = hosted_clients(world.rank, fc.clients, star.n_workers)
    load = list(range(fc.clients)) if moves(cfg, star.n_workers) and not world.is_root else home
    device = torch.device("cpu") if world.is_root else world.device
    data = world.agree(lambda: task.load_clients(load, device))
    # (a plug-in model that fails its check stops every rank, in one line)
    runner = world.agree(lambda: task.make_runner(task.build_model(), data, device))
    runner.home = home
    runner.prox_mu = fc.prox_mu
    return runner


def restore(world: World, run_path: Path, rounds: Rounds) -> dict[str, Any] | None:
    """Load the newest complete checkpoint on every rank and cut metrics.jsonl to it;
    returns this rank's state from it (None without one)."""
    ckpt, state = load_latest(world, rounds.cfg, run_path)
    if ckpt is None or state is None:
        world.log(f"fedsheaf: no complete checkpoint in {run_path}; starting from round 1")
    else:
        world.agree(lambda: rounds.load_state_dict(state, ckpt.epoch))
        world.log(f"fedsheaf: resuming {run_path} after round {ckpt.epoch}")
    if world.is_root:  # records of rounds after the checkpoint are written again
        checkpoint.cut_back(run_path, None if ckpt is None else ckpt.epoch, rounds.history)
    return state
