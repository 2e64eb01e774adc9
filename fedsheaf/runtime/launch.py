"""Launch one rank of a run: validate collectively, build the agent, train, summarise."""

from __future__ import annotations

import time
from typing import Any

from fedsheaf import experiment
from fedsheaf.algorithms import DECENTRALIZED
from fedsheaf.algorithms.base import Agent
from fedsheaf.config import ExperimentConfig, dump_config, load_config
from fedsheaf.progress import Recorder, agent_table
from fedsheaf.results import RunDir
from fedsheaf.runtime.topology import Neighbourhood
from fedsheaf.runtime.world import World, init_world


def run_decentralized(cfg: ExperimentConfig, world: World) -> dict[str, Any] | None:
    """Run a graph-coupled algorithm with one agent per rank; rank 0 returns the summary."""
    graph = world.agree(lambda: experiment.build_graph(cfg, world.size))
    ds, part = world.agree(lambda: experiment.load_and_partition(cfg))
    data = world.agree(lambda: experiment.agent_data(ds, part, world.rank, world.device))
    steps = experiment.steps_per_epoch(cfg, part)
    run_dir = world.agree(
        lambda: (
            RunDir(f"{cfg.output.dir}/{cfg.run_name()}", cfg.output.overwrite)
            if world.is_root
            else None
        )
    )
    if run_dir is not None:
        run_dir.write_config(dump_config(cfg))
    model = experiment.agent_model(cfg, ds, world.rank, world.device)
    agent = Agent(world.rank, cfg, graph, data, model, world.device, steps)
    nbr = Neighbourhood(world.comm, graph.neighbours(world.rank))
    recorder = Recorder(world, run_dir, cfg.train.epochs)
    world.log(
        f"fedsheaf: {cfg.algorithm} '{cfg.name}' on {graph.name} ({graph.n} agents, "
        f"{len(graph.edges)} edges), {ds.name} s={cfg.data.shift}, {cfg.train.epochs} "
        f"epochs x {steps} steps, device {world.device}, seed {cfg.seed}"
    )
    if run_dir is not None:
        world.log(f"fedsheaf: writing {run_dir.path}")
    start = time.perf_counter()
    DECENTRALIZED[cfg.algorithm](agent, nbr, recorder).run()
    elapsed = time.perf_counter() - start
    nbr.free()
    if not world.is_root or recorder.last is None:
        return None
    final = recorder.last
    summary = {k: v for k, v in final.items() if k != "agents"}
    summary.update(
        name=cfg.name,
        algorithm=cfg.algorithm,
        seed=cfg.seed,
        n_agents=graph.n,
        wall_seconds=elapsed,
        agents=final["agents"],
        bytes_sent_total=sum(r["bytes_sent"] for r in recorder.history),
    )
    run_dir.write_summary(summary)
    world.log("\n" + agent_table(final["agents"]))
    world.log(
        f"\nnetwork: private {summary['private_acc']:.3f}  comm {summary['comm_acc']:.3f}"
        f"  comm (degree-weighted) {summary['comm_acc_deg']:.3f}  "
        f"[{elapsed:.1f}s; results in {run_dir.path}]"
    )
    return summary


def main(config_path: str, overrides: list[str]) -> int:
    """Entry point of ``fedsheaf run`` on every rank."""
    world = init_world()
    cfg = world.agree(lambda: load_config(config_path, overrides))
    if cfg.train.device != "auto":
        from fedsheaf.runtime.world import choose_device

        world.device = world.agree(lambda: choose_device(cfg.train.device, world.local_rank))
    if cfg.decentralized:
        run_decentralized(cfg, world)
    else:
        from fedsheaf.runtime.server_launch import run_server_based

        run_server_based(cfg, world)
    world.barrier()
    return 0
