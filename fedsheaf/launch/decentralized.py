"""Launch one rank of a run: validate collectively, build the agent, train, summarise."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from fedsheaf.algorithms import make_algorithm
from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.partition import Partition
from fedsheaf.data.sources import Dataset
from fedsheaf.graphs import Graph, describe_placement, place_agents
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import RunDir
from fedsheaf.rundir.lifecycle import (
    Loaded,
    check_data,
    checkpointer,
    follow_run_dir,
    load_latest,
    open_run_dir,
    restore,
    settle_config,
)
from fedsheaf.rundir.preflight import (
    describe_graph_run,
)
from fedsheaf.rundir.progress import Recorder, accuracies, agent_table
from fedsheaf.rundir.tensorboard import Board
from fedsheaf.runtime import experiment
from fedsheaf.runtime.colocated import LocalAgents
from fedsheaf.runtime.world import World, rank_gpus
from fedsheaf.util import memory
from fedsheaf.util.units import count


def agent_devices(world: World, ids: list[int], agent_gpus: str) -> dict[int, torch.device]:
    """The device of each of this rank's agents (``ids``, in order): its device, or with
    ``train.agent_gpus=spread`` the GPUs it owns (:func:`rank_gpus`) in turn."""
    gpus = rank_gpus(world) if agent_gpus == "spread" else [world.device]
    return {i: gpus[k % len(gpus)] for k, i in enumerate(ids)}


def describe_devices(devices: Iterable[torch.device]) -> str:
    """ "device cpu", or the distinct devices of a rank's agents (rank 0's)."""
    distinct = [str(d) for d in dict.fromkeys(devices)]
    return f"device {distinct[0]}" if len(distinct) == 1 else f"devices {', '.join(distinct)}"


def build_agents(
    cfg: ExperimentConfig,
    local: LocalAgents,
    devices: dict[int, torch.device],
    graph: Graph,
    dataset: tuple[Dataset, Partition],
    steps: int,
    make: Callable[..., DecentralizedAlgorithm] | None = None,
) -> list[DecentralizedAlgorithm]:
    """This rank's algorithms, one per agent of ``local`` on its device (``devices``:
    :func:`agent_devices`), built by ``make`` (default
    :func:`~fedsheaf.algorithms.registry.make_algorithm`); the agents on one device share
    one copy of the pilots. Agents sharing a rank build in turn, as they train: a
    constructor may exchange (:meth:`LocalAgents.build`)."""
    ds, part = dataset
    pilots = {d: experiment.pilot_data(ds, part, d) for d in dict.fromkeys(devices.values())}

    def build_one(i: int, nbr: Any, reporter: Any) -> DecentralizedAlgorithm:
        device = devices[i]
        data = experiment.agent_data(ds, part, i, device, pilots[device])
        # (a plug-in model that fails its check stops every rank, in one line)
        model = experiment.agent_model(cfg, ds, i, device, graph)
        agent = Agent(i, cfg, graph, data, model, device, steps)
        return (make or make_algorithm)(agent, nbr, reporter)

    return local.build(build_one)


def run_decentralized(
    cfg: ExperimentConfig,
    world: World,
    make: Callable[..., DecentralizedAlgorithm] | None = None,
    job: World | None = None,
    loaded: Loaded | None = None,
    dataset: tuple[Dataset, Partition] | None = None,
) -> dict[str, Any] | None:
    """Run a graph-coupled algorithm, its agents placed on the ranks (one per rank, or
    several: ``train.placement``); rank 0 returns the summary.

    ``make(agent, nbr, reporter)`` builds the algorithm (default: what the registry
    builds for ``cfg.algorithm`` and ``cfg.algorithm_args``,
    :func:`~fedsheaf.algorithms.registry.make_algorithm`; fedsheaf.launch.hub passes one
    that also holds the server).
    ``job`` is the set of ranks that write checkpoints (default ``world``; a hub run's
    whole job, server included) and ``loaded`` what :func:`load_latest` already read
    on it when resuming; ``dataset`` the data set and partition the job already loaded
    (every rank gives one, or none does).
    """
    job = job or world
    graph = world.agree(lambda: experiment.build_graph(cfg, world.size))
    placement = place_agents(graph, world.size, cfg.train.placement)
    ds, part = dataset or world.agree(lambda: experiment.load_and_partition(cfg))
    steps = experiment.steps_per_epoch(cfg, part)
    for warning in experiment.data_warnings(cfg, part, graph):
        world.warn(warning)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    # (a hub run's server checks it, and records it: it commits the checkpoints)
    digest = check_data(world, cfg, ds, run_path) if job is world else None
    recorder = Recorder(world, None, cfg.train.epochs)
    local = LocalAgents(world.comm, graph, placement, recorder.rank_epoch, cfg.train.release_memory)
    devices = agent_devices(world, local.ids, cfg.train.agent_gpus)

    def build() -> list[DecentralizedAlgorithm]:
        return build_agents(cfg, local, devices, graph, (ds, part), steps, make)

    # built before the run directory is touched: what fails here (an empty pilot set)
    # leaves a run that output.overwrite=true would replace as it was
    algos = world.agree(build)
    algo = algos[0]
    if job is world:
        run_dir: RunDir | None = world.agree(lambda: open_run_dir(cfg, run_path), root_only=True)
    else:  # the job checked it (and may have written its server's checkpoints since)
        run_dir = RunDir(run_path, extend=cfg.checkpoint.resume) if world.is_root else None
    recorder.run_dir = run_dir
    first_epoch, resumed_state = 0, None
    if cfg.checkpoint.resume:
        # (a hub run's job resumes on the rank count it wrote: it read its checkpoint)
        loaded = loaded or load_latest(job, cfg, run_path, placement if job is world else None)
        first_epoch = restore(
            world, run_path, lambda state: local.load(algos, state), recorder, loaded
        )
        resumed_state = loaded[1]
    if run_dir is not None:
        settle_config(run_dir, cfg)
        if cfg.output.tensorboard:  # (after the restore: metrics.jsonl cut to the checkpoint)
            recorder.board = Board(run_dir.path, "epoch", first_epoch + 1, recorder.history)
    world.barrier()  # an earlier launch's failed.json is gone before any rank may write one
    follow_run_dir(run_path)
    malloc = memory.malloc_library()
    shared = f" (malloc {malloc})" if local.shared else ""
    world.log(
        f"fedsheaf: {describe_graph_run(cfg, graph, ds, steps)}, "
        f"{describe_placement(graph, placement, cfg.train.placement)}{shared}, "
        f"{describe_devices(devices.values())}, "
        f"{count(world.threads, 'thread')} per rank, seed {cfg.seed}"
    )
    if run_dir is not None:
        world.log(f"fedsheaf: writing {run_dir.path}")
    clock = checkpoint.WallClock()
    clock.resumed(resumed_state)

    def state() -> dict[str, Any]:
        out = local.state(algos)
        if world.is_root:
            out["history"] = recorder.history
            out[clock.KEY] = clock.total()
        return out

    try:
        saving = checkpointer(
            cfg, job, run_path, state, digest, placement if job is world else None
        )
        local.run(algos, first_epoch, saving)
    finally:
        recorder.close()
    elapsed = clock.stop()
    local.free()
    # (a hub's agents: not its server)
    peaks = world.peak_memory(list(dict.fromkeys(devices.values())))
    if not world.is_root or recorder.last is None or peaks is None:
        return None
    assert run_dir is not None  # the root rank's (None on the others)
    final = recorder.last
    summary = {k: v for k, v in final.items() if k != "agents"}
    summary.update(
        name=cfg.name,
        algorithm=cfg.algorithm,
        seed=cfg.seed,
        n_agents=graph.n,
        wall_seconds=elapsed,
        threads_per_rank=world.threads,
        agents=final["agents"],
        bytes_sent_total=sum(r["bytes_sent"] for r in recorder.history),
        memory=peaks,
        ranks=world.size,
        agents_per_rank=[len(block) for block in placement],
        malloc=malloc,
    )
    if all("mpi_bytes_sent" in r for r in recorder.history):  # (not for runs from before it)
        summary["mpi_bytes_total"] = sum(r["mpi_bytes_sent"] for r in recorder.history)
    for key in ("server_bytes_sent", "server_bytes_received"):  # the centralized baselines
        if all(key in r for r in recorder.history):  # not for runs resumed from before it
            summary[f"{key}_total"] = sum(r[key] for r in recorder.history)
    extras = algo.summary_extras(final["agents"])  # e.g. Sheaf-FMTL's map memory
    summary.update(extras)
    run_dir.write_summary(summary)
    world.log("\n" + agent_table(final["agents"]))
    world.log(memory.describe(summary["memory"]))
    if extras:
        world.log("\n" + "  ".join(f"{k} {v}" for k, v in extras.items()))
    world.log(f"\nnetwork: {accuracies(summary)}  [{clock.describe()}; results in {run_dir.path}]")
    return summary
