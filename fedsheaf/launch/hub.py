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

from fedsheaf.algorithms import HUB_AGENTS, HUB_SERVERS
from fedsheaf.algorithms.hub_base import HubContext
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.launch.decentralized import run_decentralized
from fedsheaf.rundir.lifecycle import (
    check_data,
    checkpointer,
    follow_run_dir,
    load_latest,
    open_run_dir,
)
from fedsheaf.rundir.preflight import hub_graph
from fedsheaf.runtime import experiment
from fedsheaf.runtime.star import SERVER, Star, StarHub, agent_world, split_off_server
from fedsheaf.runtime.world import UserErrorExit, World, note_role


def run_hub(cfg: ExperimentConfig, world: World) -> dict[str, Any] | None:
    """Run FedProto or FedMuscle: server on rank 0, agents on ranks 1..N."""
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
    note_role(SERVER, "the server")  # (named so where the job's last words name it)
    agents_comm = split_off_server(world)
    if world.rank == 0:
        server = HUB_SERVERS[cfg.algorithm](ctx, hub)
        ckpt, state = loaded or (None, None)
        if ckpt is not None and state is not None:
            server.load_state_dict(state["server"])
        save = checkpointer(cfg, world, run_path, lambda: {"server": server.state_dict()}, digest)
        follow_run_dir(run_path)
        server.serve(ckpt.epoch if ckpt is not None else 0, save)
        return None
    try:
        cls = HUB_AGENTS[cfg.algorithm]
        summary = run_decentralized(
            cfg,
            agent_world(world, agents_comm),
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
