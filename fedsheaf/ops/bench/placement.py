"""The placement case: N agents on R ranks (issue 29), run on every rank of one launch.

One launch per rank count R: the agents are placed on the launch's ranks as a run
places them (:func:`fedsheaf.graphs.place_agents`, ``train.placement``), built as a run
builds them (:func:`fedsheaf.launch.decentralized.build_agents`: devices, shared pilots)
and trained through the run's own path (:class:`fedsheaf.runtime.colocated.LocalAgents`:
one agent per rank over a graph neighbourhood, or several taking turns on a rank with one
neighbourhood collective per exchange between ranks). Epoch time is barrier to barrier
over all ranks after every agent of every rank has finished the epoch (a warm-up epoch
first, the last epoch, which evaluates, left out); memory is every rank's peak resident
set, whose sum over ranks is what the host holds.

Launches of one ``group`` (the same agents at several R) are compared in the summary:
memory summed over ranks against R = N's, epoch time against the best of R = 1 and R = N
(the issue's goal: within 1.2×).
"""

from __future__ import annotations

import os
import time
from typing import Any

from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig, apply_overrides, read_yaml
from fedsheaf.graphs import cut_edges, load_graph, place_agents
from fedsheaf.launch.decentralized import agent_devices, build_agents
from fedsheaf.ops.bench.formulas import summary
from fedsheaf.ops.bench.rank_tools import idle_barrier, mps_pipe
from fedsheaf.runtime import experiment
from fedsheaf.runtime.colocated import LocalAgents
from fedsheaf.runtime.world import World
from fedsheaf.util import memory
from fedsheaf.util.errors import ConfigError


def placement_config(spec: dict[str, Any]) -> ExperimentConfig:
    """The launch's config: ``config`` with ``overrides``, trained for a warm-up epoch,
    ``repeats`` timed epochs and a last (evaluated) one; with an ``agent`` entry in the
    spec, every node of the graph gets a copy of that agent (a graph of many identical
    small models, e.g. ``graphs/er100.yaml``)."""
    raw = apply_overrides(read_yaml(spec["config"]), list(spec["overrides"]))
    if "agent" in spec:
        n = load_graph(raw["graph"]).n
        raw["agents"] = [dict(spec["agent"]) for _ in range(n)]
    epochs = int(spec["repeats"]) + 2
    train = dict(raw.get("train") or {})
    train.update(epochs=epochs, eval_every=epochs)
    raw["train"] = train
    return build(ExperimentConfig, raw)


def check_malloc(spec: dict[str, Any]) -> str:
    """The malloc this rank runs on; a :class:`ConfigError` where the launch asks for
    another (``malloc``: a preload the loader did not find leaves glibc's, and the
    launch would time the wrong allocator)."""
    wanted, malloc = spec.get("malloc"), memory.malloc_library()
    if wanted and malloc != wanted:
        raise ConfigError(
            f"launch {spec['label']} needs {wanted} as malloc, found {malloc} "
            f"(LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r})"
        )
    return malloc


def placement(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    """Train the launch's agents placed on its ranks; rank 0 returns the epoch times,
    the placement and the bytes that crossed MPI (the launch record has the memory)."""
    malloc = check_malloc(spec)
    cfg = world.agree(lambda: placement_config(spec))
    graph = world.agree(lambda: experiment.build_graph(cfg, world.size))
    blocks = place_agents(graph, world.size, cfg.train.placement)
    ds, part = world.agree(lambda: experiment.load_and_partition(cfg))
    steps = experiment.steps_per_epoch(cfg, part)
    local = LocalAgents(
        world.comm, graph, blocks, lambda records, sent: None, cfg.train.release_memory
    )

    devices = agent_devices(world, local.ids, cfg.train.agent_gpus)
    algos = world.agree(lambda: build_agents(cfg, local, devices, graph, (ds, part), steps))
    stamps: list[float] = []

    def after_epoch(_epoch: int) -> None:  # once per rank, every agent of it done
        idle_barrier(world.comm)
        stamps.append(time.perf_counter())

    idle_barrier(world.comm)
    stamps.append(time.perf_counter())
    local.run(algos, 0, after_epoch)
    mpi_bytes = world.gather(local.mpi_bytes())
    agent_bytes = world.gather(sum(sum(n.bytes_total.values()) for n in local.nbrs))
    local.free()
    if not world.is_root:
        return None
    epochs = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    timed = epochs[1:-1]  # (not the warm-up epoch, nor the last, which evaluates)
    return {
        "label": spec["label"],
        "group": spec.get("group", spec["config"]),
        "reference": spec.get("reference"),
        "config": spec["config"],
        "overrides": spec["overrides"],
        "algorithm": cfg.algorithm,
        "agents": graph.n,
        "edges": len(graph.edges),
        "ranks": world.size,
        "placement": cfg.train.placement,
        "agents_per_rank": [len(b) for b in blocks],
        "cut_edges": cut_edges(graph, blocks),
        "steps_per_epoch": steps,
        "threads_per_rank": world.threads,
        "device": world.device.type,
        "malloc": malloc,
        "mps": mps_pipe() if world.device.type == "cuda" else None,
        "epoch_seconds": timed,
        "all_epoch_seconds": epochs,
        "stats": summary(timed),
        "mpi_bytes_total": sum(mpi_bytes or []),
        "algorithm_bytes_total": sum(agent_bytes or []),
    }


CASES = {"placement": placement}
