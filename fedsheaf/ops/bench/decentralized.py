"""Decentralized benchmark cases, run on every rank of one launch (targets 1–3).

Each case takes the rank's :class:`~fedsheaf.runtime.world.World` and the launch's spec
(a dict; see :mod:`fedsheaf.ops.bench.plan`) and returns its result on rank 0 (None
elsewhere). Quantities compared with each other are measured *in the same launch*,
alternating A B B A …, so that a change of machine load hits both sides alike; each
is repeated and the medians are compared.

* :func:`overhead` — Sheaf-FRL against the non-cooperative baseline, epoch time, plus
  a per-phase profile of one more epoch of each.
* :func:`traffic` — pilot bytes per step, measured by the neighbourhood's byte counters,
  against the closed forms (standard and strict-privacy) and FedAvg's bytes.
* :func:`speedup` — the agents' models trained one after another in rank 0 (the other
  ranks sleep) against one rank per agent.
* :func:`scaling` — weak scaling: n identical agents on a ring, one per rank, for each n.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fedsheaf.algorithms import SHEAF_VARIANTS, make_algorithm
from fedsheaf.algorithms.base import Agent, AgentData, DecentralizedAlgorithm
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.algorithms.sheaf_frl_pilots import PilotPlan
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig, apply_overrides, load_config, read_yaml
from fedsheaf.data.partition import Partition
from fedsheaf.data.sources import Dataset
from fedsheaf.graphs import Graph, ring
from fedsheaf.ops.bench.formulas import (
    fedavg_bytes_per_step,
    measure_alternating,
    phase_table,
    pilot_bytes_by_agent,
    pilot_bytes_per_step,
    ratio,
    strict_bytes_by_agent,
    strict_bytes_per_step,
    summary,
)
from fedsheaf.ops.bench.plan import K_METHOD
from fedsheaf.ops.bench.rank_tools import (
    Clock,
    NoNeighbours,
    Silent,
    idle_barrier,
    mps_pipe,
    sync,
)
from fedsheaf.runtime import experiment
from fedsheaf.runtime.topology import Neighbourhood
from fedsheaf.runtime.world import World
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import usable_cpus
from fedsheaf.util.timers import PhaseTimer

# ---- building agents ----------------------------------------------------------------


@dataclass
class Setup:
    """What every agent of a launch shares: graph, data set, partition, steps per epoch."""

    graph: Graph
    ds: Dataset
    part: Partition
    steps: int


def load(world: World, spec: dict[str, Any], *extra: str) -> ExperimentConfig:
    """The launch's config with ``extra`` overrides (a user error stops every rank once)."""
    return world.agree(lambda: load_config(spec["config"], [*spec["overrides"], *extra]))


def shared_setup(world: World, cfg: ExperimentConfig) -> Setup:
    graph = world.agree(lambda: experiment.build_graph(cfg, world.size))
    ds, part = world.agree(lambda: experiment.load_and_partition(cfg))
    return Setup(graph, ds, part, experiment.steps_per_epoch(cfg, part))


def build_algorithm(
    cfg: ExperimentConfig,
    s: Setup,
    agent_id: int,
    device: torch.device,
    nbr: Any,
    data: AgentData | None = None,
) -> DecentralizedAlgorithm:
    """Agent ``agent_id`` with a fresh seeded model, running ``cfg.algorithm``."""
    if data is None:
        data = experiment.agent_data(s.ds, s.part, agent_id, device)
    model = experiment.agent_model(cfg, s.ds, agent_id, device)
    agent = Agent(agent_id, cfg, s.graph, data, model, device, s.steps)
    return make_algorithm(agent, nbr, Silent())


class Epochs:
    """Timed training epochs of several algorithms on one communicator.

    Every algorithm keeps its own epoch counter, so its batch order and pilot stream
    advance as in a real run however the epochs of different algorithms interleave.
    """

    def __init__(self, comm: Any, device: torch.device) -> None:
        self.clock = Clock(comm, device)
        self.device = device
        self.done: dict[str, int] = {}

    def _work(self, name: str, algo: DecentralizedAlgorithm) -> Callable[[], None]:
        epoch = self.done.get(name, 0)
        self.done[name] = epoch + 1

        def work() -> None:
            algo.train_epoch(epoch)
            algo.end_epoch(epoch)

        return work

    def time(self, name: str, algo: DecentralizedAlgorithm) -> float:
        return self.clock.time(self._work(name, algo))

    def profile(self, name: str, algo: DecentralizedAlgorithm) -> dict[str, float]:
        """One epoch with per-phase timers on: this rank's seconds per step, by phase."""
        cuda = self.device.type == "cuda"
        timer = PhaseTimer(sync=(lambda: sync(self.device)) if cuda else None)
        algo.timer = timer
        try:
            total = self.time(name, algo)
        finally:
            del algo.timer  # back to the class default (no-op)
        phases = timer.totals()
        phases["other"] = max(0.0, total - sum(phases.values()))
        steps = algo.agent.steps_per_epoch
        out = {k: v / steps for k, v in phases.items()}
        out["step"] = total / steps
        return out


# ---- target 1: overhead of cooperation ------------------------------------------------

OVERHEAD_METHODS: dict[str, list[str]] = {
    "noncoop": ["algorithm=noncoop"],
    "sheaf_frl": ["algorithm=sheaf_frl"],
    "sheaf_frl_overlap": ["algorithm=sheaf_frl", "sheaf.overlap_exchange=true"],
    "sheaf_frl_fused": ["algorithm=sheaf_frl", "sheaf.fused_pilots=true"],
}


def check_pilot_batches(
    cfgs: dict[str, ExperimentConfig], algos: dict[str, DecentralizedAlgorithm]
) -> None:
    """Refuse a Sheaf-FRL method that would be timed under a K it does not run: a K
    above the pilot set (the whole set is encoded each step), or a ``--pilot-batches``
    method under ``pilot_strategy: prototype`` (one column per class, whatever K)."""
    for name, algo in algos.items():
        pilots = getattr(algo, "pilots", None)
        if not isinstance(pilots, PilotPlan):
            continue
        asked = cfgs[name].sheaf.pilot_batch
        if pilots.strategy == "prototype":
            if name.startswith(K_METHOD):
                raise ConfigError(
                    f"method {name}: sheaf.pilot_strategy=prototype encodes one pilot column "
                    "per class whatever K is; --pilot-batches times nothing new here"
                )
        elif pilots.columns != asked:
            raise ConfigError(
                f"method {name}: K = {asked} pilots per step, but the shared pilot set "
                f"holds {len(algo.agent.data.x_pilot)}; choose a smaller K "
                "(--pilot-batches) or more pilots (data.pilot_fraction, data.limit)"
            )


def overhead(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    methods = dict(OVERHEAD_METHODS)
    methods.update(spec.get("extra_methods", {}))
    cfgs = {name: load(world, spec, *ovr) for name, ovr in methods.items()}
    s = shared_setup(world, cfgs["noncoop"])
    nbr = Neighbourhood(world.comm, s.graph.neighbours(world.rank))
    data = experiment.agent_data(s.ds, s.part, world.rank, world.device)
    algos = {
        name: build_algorithm(cfg, s, world.rank, world.device, nbr, data)
        for name, cfg in cfgs.items()
    }
    world.agree(lambda: check_pilot_batches(cfgs, algos))
    names = list(algos)
    epochs = Epochs(world.comm, world.device)
    # the warm-up call per method primes the allocator, first-step SVDs and caches
    times = measure_alternating(names, spec["repeats"], lambda n: epochs.time(n, algos[n]))
    profiles = {name: world.gather(epochs.profile(name, algos[name])) for name in names}
    nbr.free()
    if not world.is_root:
        return None
    stats = {name: summary(ts) for name, ts in times.items()}
    base = stats["noncoop"]["median"]
    return {
        "label": spec["label"],
        "config": spec["config"],
        "overrides": spec["overrides"],
        "agents": s.graph.n,
        "edges": len(s.graph.edges),
        "steps_per_epoch": s.steps,
        "batch_size": cfgs["noncoop"].train.batch_size,
        "pilot_batch": cfgs["sheaf_frl"].sheaf.pilot_batch,
        "epoch_seconds": times,
        "stats": stats,
        "ratio": {name: ratio(st["median"], base) for name, st in stats.items()},
        "paired_ratio": {
            name: statistics.median(
                a / b for a, b in zip(times[name], times["noncoop"], strict=True)
            )
            for name in names
        },
        "phases": {name: phase_table(p) for name, p in profiles.items() if p is not None},
    }


# ---- target 2: bytes on the wire ------------------------------------------------------


def traffic(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    variants: dict[str, list[str]] = {"standard": []}
    if "strict" in SHEAF_VARIANTS:
        variants["strict"] = ["sheaf.variant=strict"]
    steps = spec["bytes_steps"]
    cfgs = {
        v: load(world, spec, "algorithm=sheaf_frl", f"train.steps_per_epoch={steps}", *ovr)
        for v, ovr in variants.items()
    }
    s = shared_setup(world, cfgs["standard"])
    nbr = Neighbourhood(world.comm, s.graph.neighbours(world.rank))
    data = experiment.agent_data(s.ds, s.part, world.rank, world.device)
    sent: dict[str, int] = {}
    k = params = 0
    for v, cfg in cfgs.items():
        algo = build_algorithm(cfg, s, world.rank, world.device, nbr, data)
        assert isinstance(algo, SheafFRL)  # every variant is algorithm=sheaf_frl
        k = algo.pilots.columns
        params = sum(p.numel() for p in algo.model.parameters())
        nbr.take_round_bytes()
        for epoch in range(spec["bytes_epochs"]):
            algo.train_epoch(epoch)
            algo.end_epoch(epoch)
        sent[v] = sum(nbr.take_round_bytes().values())
    nbr.free()
    rows = world.gather({"sent": sent, "params": params, "k": k})
    if rows is None:
        return None
    n_steps = spec["bytes_epochs"] * s.steps
    formulas = {
        "standard": (pilot_bytes_per_step, pilot_bytes_by_agent),
        "strict": (strict_bytes_per_step, strict_bytes_by_agent),
    }
    fedavg = fedavg_bytes_per_step([r["params"] for r in rows])
    out: dict[str, Any] = {
        "label": spec["label"],
        "config": spec["config"],
        "agents": s.graph.n,
        "edges": len(s.graph.edges),
        "dims": list(s.graph.dims),
        "pilot_batch": k,
        "steps": n_steps,
        "params": [r["params"] for r in rows],
        "fedavg_bytes_per_step": fedavg,
        "variants": {},
    }
    for v in cfgs:
        total, by_agent = formulas[v]
        measured = sum(r["sent"][v] for r in rows) / n_steps
        expected = total(s.graph, k)
        per_agent = [r["sent"][v] / n_steps for r in rows]
        worst = max(
            (abs(m - e) / e for m, e in zip(per_agent, by_agent(s.graph, k), strict=True) if e),
            default=0.0,
        )
        out["variants"][v] = {
            "measured_bytes_per_step": measured,
            "formula_bytes_per_step": expected,
            "ratio_to_formula": ratio(measured, expected),
            "worst_agent_deviation": worst,
            "fraction_of_fedavg": ratio(measured, fedavg),
        }
    return out


# ---- target 3a: one rank per agent vs one process ---------------------------------------


def speedup(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    cfg = load(world, spec, "algorithm=noncoop")
    s = shared_setup(world, cfg)
    nbr = Neighbourhood(world.comm, s.graph.neighbours(world.rank))
    own = build_algorithm(cfg, s, world.rank, world.device, nbr)
    algos = {"parallel": own}
    if spec.get("with_sheaf", True):
        algos["parallel_sheaf_frl"] = build_algorithm(
            load(world, spec, "algorithm=sheaf_frl"), s, world.rank, world.device, nbr
        )
    alone = NoNeighbours()
    solo = (
        [build_algorithm(cfg, s, i, world.device, alone) for i in range(s.graph.n)]
        if world.is_root
        else []
    )
    threads_parallel = torch.get_num_threads()
    threads_sequential = int(spec.get("sequential_threads") or usable_cpus())
    epochs = Epochs(world.comm, world.device)
    seq_epoch = [0]

    def sequential() -> float:
        """Rank 0 trains every agent's model in turn; the others sleep meanwhile."""
        idle_barrier(world.comm)
        elapsed = 0.0
        if world.is_root:
            torch.set_num_threads(threads_sequential)
            sync(world.device)
            start = time.perf_counter()
            for algo in solo:
                algo.train_epoch(seq_epoch[0])
                algo.end_epoch(seq_epoch[0])
            sync(world.device)
            elapsed = time.perf_counter() - start
            torch.set_num_threads(threads_parallel)
        seq_epoch[0] += 1
        idle_barrier(world.comm)
        return elapsed

    def one(name: str) -> float:
        return sequential() if name == "sequential" else epochs.time(name, algos[name])

    names = ["sequential", *algos]
    times = measure_alternating(names, spec["repeats"], one)
    nbr.free()
    if not world.is_root:
        return None
    stats = {name: summary(ts) for name, ts in times.items()}
    seq = stats["sequential"]["median"]
    return {
        "label": spec["label"],
        "config": spec["config"],
        "overrides": spec["overrides"],
        "agents": s.graph.n,
        "steps_per_epoch": s.steps,
        "threads": {"sequential": threads_sequential, "parallel_per_rank": threads_parallel},
        "device": world.device.type,
        "mps": mps_pipe() if world.device.type == "cuda" else None,
        "epoch_seconds": times,
        "stats": stats,
        "speedup": {n: ratio(seq, st["median"]) for n, st in stats.items() if n != "sequential"},
    }


# ---- target 3b: weak scaling --------------------------------------------------------------


def scaling_config(spec: dict[str, Any], n_agents: int) -> ExperimentConfig:
    """The base config with ``n_agents`` copies of one agent (every class, equal shards)."""
    raw = apply_overrides(read_yaml(spec["config"]), list(spec["overrides"]))
    agent = dict(spec["agent"])
    agent.setdefault("classes", list(range(10)))
    raw["agents"] = [dict(agent) for _ in range(n_agents)]
    raw["algorithm"] = "sheaf_frl"
    return build(ExperimentConfig, raw)


def scaling(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    counts = sorted({int(n) for n in spec["ranks"] if int(n) <= world.size})
    cfg = world.agree(lambda: scaling_config(spec, world.size))
    ds, part = world.agree(lambda: experiment.load_and_partition(cfg))
    steps = experiment.steps_per_epoch(cfg, part)
    data = experiment.agent_data(ds, part, world.rank, world.device)
    d = cfg.agents[0].dim
    assert d is not None  # (SCALING_AGENT is the built-in cnn)
    runs: dict[int, tuple[DecentralizedAlgorithm, Any, Epochs]] = {}
    for n in counts:
        active = world.rank < n
        sub = world.comm.Split(0 if active else 1, world.rank)
        if not active:
            sub.Free()
            continue
        graph = ring([d] * n, name=f"ring{n}")
        nbr = Neighbourhood(sub, graph.neighbours(world.rank))
        s = Setup(graph, ds, part, steps)
        algo = build_algorithm(cfg, s, world.rank, world.device, nbr, data)
        runs[n] = (algo, (sub, nbr), Epochs(sub, world.device))

    def one(n: int) -> float:
        elapsed = 0.0
        if n in runs:
            algo, _, epochs = runs[n]
            elapsed = epochs.time(str(n), algo)
        idle_barrier(world.comm)
        return elapsed

    times = measure_alternating(counts, spec["repeats"], one)
    profiles = {}
    for n in counts:
        mine = runs[n][2].profile(str(n), runs[n][0]) if n in runs else None
        idle_barrier(world.comm)
        profiles[str(n)] = [p for p in world.gather(mine) or [] if p is not None]
    for _, (sub, nbr), _ in runs.values():
        nbr.free()
        sub.Free()
    if not world.is_root:
        return None
    stats = {n: summary(ts) for n, ts in times.items()}
    t1 = stats[counts[0]]["median"]
    return {
        "label": spec["label"],
        "config": spec["config"],
        "overrides": spec["overrides"],
        "agent": spec["agent"],
        "latent_dim": d,
        "steps_per_epoch": steps,
        "ranks": counts,
        "epoch_seconds": {str(n): ts for n, ts in times.items()},
        "stats": {str(n): st for n, st in stats.items()},
        "time_ratio": {str(n): ratio(st["median"], t1) for n, st in stats.items()},
        "phases": {n: phase_table(p) for n, p in profiles.items()},
    }


CASES: dict[str, Callable[[World, dict[str, Any]], dict[str, Any] | None]] = {
    "overhead": overhead,
    "bytes": traffic,
    "speedup": speedup,
    "scaling": scaling,
}
