"""Heterogeneous agents on a graph *plus* a server: FedProto and FedMuscle (SPEC §3).

Rank 0 is the server; ranks 1..N are the graph's agents 0..N-1. The agents run the
ordinary decentralized loop (:func:`~fedsheaf.launch.decentralized.run_decentralized`) on
a communicator of the agents only — their graph neighbourhood is used for the
post-hoc maps and communication accuracy — and talk to the server through a
:class:`~fedsheaf.runtime.star.Star` on the world communicator. The server runs the
algorithm's server loop, which mirrors the agents' schedule exactly.

Everything a rank could reject (graph, rank count, data, run directory, the
checkpoint to resume from) is checked collectively on the *whole* world first, so
a user error never leaves the server waiting for agents that have already stopped.

Checkpoints span the whole job: the server writes ``rank-0.pt`` (FedProto's
prototypes), agent ``i`` writes ``rank-{i+1}.pt``, and the server commits the
manifest after a barrier of all ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from fedsheaf.algorithms import HUB_AGENTS, HUB_SERVERS
from fedsheaf.algorithms.hub_base import HubContext
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.rundir.preflight import hub_graph
from fedsheaf.runtime import experiment
from fedsheaf.runtime.star import Star
from fedsheaf.runtime.world import UserErrorExit, World, note_run_dir


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


def _agent_world(world: World, comm: Any) -> World:
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


def run_hub(cfg: ExperimentConfig, world: World) -> dict[str, Any] | None:
    """Run FedProto or FedMuscle: server on rank 0, agents on ranks 1..N."""
    from fedsheaf.launch.decentralized import (
        check_data,
        checkpointer,
        load_latest,
        open_run_dir,
        run_decentralized,
    )

    graph = world.agree(lambda: hub_graph(cfg, world.size))
    ds, part = world.agree(lambda: experiment.load_and_partition(cfg))
    if world.rank > 0:
        world.agree(lambda: experiment.agent_data(ds, part, world.rank - 1, world.device))
    else:
        world.agree(lambda: None)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    digest = check_data(world, cfg, ds, run_path)
    world.agree(lambda: open_run_dir(cfg, run_path), root_only=True)
    loaded = load_latest(world, cfg, run_path) if cfg.checkpoint.resume else None

    ctx = HubContext(
        cfg=cfg,
        n_agents=graph.n,
        dim=graph.dims[0],
        n_classes=ds.n_classes,
        steps_per_epoch=experiment.steps_per_epoch(cfg, part),
        n_pilots=len(part.pilots),
    )
    hub = StarHub(Star(world.comm))
    agents_comm = world.comm.Split(MPI.UNDEFINED if world.rank == 0 else 1, world.rank)
    if world.rank == 0:
        server = HUB_SERVERS[cfg.algorithm](ctx, hub)
        ckpt, state = loaded or (None, None)
        if ckpt is not None and state is not None:
            server.load_state_dict(state["server"])
        save = checkpointer(cfg, world, run_path, lambda: {"server": server.state_dict()}, digest)
        note_run_dir(run_path)
        server.serve(ckpt.epoch if ckpt is not None else 0, save)
        return None
    try:
        cls = HUB_AGENTS[cfg.algorithm]
        summary = run_decentralized(
            cfg,
            _agent_world(world, agents_comm),
            make=lambda agent, nbr, rep: cls(agent, nbr, rep, hub, ctx),
            job=world,
            loaded=loaded,
            dataset=(ds, part),
        )
    except UserErrorExit as exc:  # reported by agent 0; the server must not wait for it
        world.comm.Abort(exc.code)
        raise
    # (on an error the abort hook ends the job: freeing, a collective, could wait instead)
    agents_comm.Free()
    return summary
