"""Build one agent of a decentralized run from its config (no MPI here).

Every rank calls these with its own rank id; the partition is a deterministic
function of the seed, so each rank derives its own shard without any data
travelling over MPI.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from fedsheaf.algorithms.base import AgentData
from fedsheaf.config.sections import EQUAL_DIM_ONLY, ExperimentConfig
from fedsheaf.data.datasets_registry import load_split, splits_read
from fedsheaf.data.partition import Partition, label_shift_partition, pilot_then_pools
from fedsheaf.data.partitions_registry import GRAPH_PARTITIONS, partition_kwargs, run_partition
from fedsheaf.data.sources import Dataset
from fedsheaf.graphs import Graph, load_graph, validate_for_world
from fedsheaf.models.encoders import AgentModel
from fedsheaf.models.registry import build_agent, check_agent_model
from fedsheaf.models.seeded import set_dropout_generator
from fedsheaf.util.errors import ConfigError, GraphError
from fedsheaf.util.hostinfo import singleton_hint
from fedsheaf.util.seeding import derive_seed
from fedsheaf.util.units import count


def build_graph(cfg: ExperimentConfig, n_ranks: int) -> Graph:
    """Load the graph file and check it against the config and the rank count."""
    assert cfg.graph is not None  # ExperimentConfig.check requires it of graph runs
    graph = load_graph(cfg.graph)
    try:
        validate_for_world(graph, n_ranks)
    except GraphError as exc:
        raise GraphError(f"{exc}{singleton_hint(n_ranks)}") from None
    if len(cfg.agents) != graph.n:
        raise ConfigError(
            f"config lists {len(cfg.agents)} agents but graph {cfg.graph} has {graph.n} nodes"
        )
    for i, agent in enumerate(cfg.agents):
        if agent.dim is not None and agent.dim != graph.dims[i]:
            raise ConfigError(
                f"agents[{i}] has latent dimension {agent.dim} (last encoder width)"
                f" but graph {cfg.graph} gives node {i} dim {graph.dims[i]}"
            )
    check_equal_dims(cfg, graph)
    return graph


def check_equal_dims(cfg: ExperimentConfig, graph: Graph) -> None:
    """The methods that need equal latent dimensions get them from the graph file (a
    plug-in model's d is not in the config: :meth:`ExperimentConfig._check_method`
    checks the cnn agents' before any rank starts)."""
    dims = sorted(set(graph.dims))
    if len(dims) <= 1:
        return
    if cfg.algorithm in EQUAL_DIM_ONLY:
        raise ConfigError(
            f"algorithm {cfg.algorithm} needs every agent to have the same latent "
            f"dimension d, but graph {cfg.graph} gives d = {dims}; use "
            "sheaf_frl, noncoop, comfed or sheaf_fmtl for unequal dimensions"
        )
    if cfg.algorithm == "sheaf_frl" and cfg.sheaf.variant == "homogeneous":
        raise ConfigError(
            f"sheaf.variant=homogeneous (Algorithm 2) needs equal latent dimensions, but "
            f"graph {cfg.graph} gives d = {dims}; use sheaf.variant=standard or strict"
        )


def graph_class_warning(cfg: ExperimentConfig, graph: Graph) -> str | None:
    """A warning when the graph file's per-node classes (metadata, from which class-overlap
    graphs draw their edges) are not the agents' classes: a graph built for other agents."""
    if graph.classes is None:
        return None
    differ = [
        i for i, a in enumerate(cfg.agents) if tuple(sorted(set(a.classes))) != graph.classes[i]
    ]
    if not differ:
        return None
    i = differ[0]
    more = f" (and {count(len(differ) - 1, 'other node')})" if len(differ) > 1 else ""
    return (
        f"fedsheaf: warning: graph {cfg.graph} gives node {i} classes {list(graph.classes[i])} "
        f"but agents[{i}].classes is {sorted(set(cfg.agents[i].classes))}{more}: the graph "
        "was built for other class sets, and its edges may not follow the agents' data"
    )


def fetch_data(cfg: ExperimentConfig) -> None:
    """Fetch the data set's missing files: load the splits the run reads with download
    (torchvision fetches every split at once). With ``data.download``, one rank calls
    this before the others read the data root, so that a job's ranks do not all
    download into the same directory at once."""
    for split in splits_read(cfg):
        load_split(cfg.data, split, download=True)


def check_agent_classes(cfg: ExperimentConfig, n_classes: int) -> None:
    """Every agent's target classes are class ids of the data set (``n_classes`` of
    them): checked once the data set is known, before training."""
    for i, agent in enumerate(cfg.agents):
        bad = [c for c in agent.classes if c >= n_classes]
        if bad:
            raise ConfigError(
                f"config key 'agents[{i}].classes' has class ids {bad} outside 0..{n_classes - 1}"
            )


def load_and_partition(cfg: ExperimentConfig) -> tuple[Dataset, Partition]:
    """The global data set T and its partition (identical on every rank): Eq. 23's label
    shift, or pilots then ``data.partition``'s pools (:func:`pilot_then_pools`)."""
    dc = cfg.data
    ds = load_split(dc, dc.split)
    check_agent_classes(cfg, ds.n_classes)
    seed = derive_seed(cfg.seed, "partition")
    if dc.partition.strip() == "label_shift":
        part = label_shift_partition(
            ds.y.numpy(),
            [a.classes for a in cfg.agents],
            dc.shift,
            seed,
            dc.pilot_fraction,
            n_classes=ds.n_classes,
        )
    else:  # pilots first (from every class), then the named partition of the rest
        kwargs = partition_kwargs(dc.partition, dc.dirichlet_alpha, dc.partition_args, "data")
        part = pilot_then_pools(
            ds.y.numpy(),
            len(cfg.agents),
            seed,
            lambda y, n, s: run_partition(GRAPH_PARTITIONS, dc.partition, y, n, s, kwargs),
            dc.pilot_fraction,
            n_classes=ds.n_classes,
        )
    if part.pilots.size == 0:  # every method maps latents through the pilots
        raise ConfigError(
            f"the shared pilot set is empty: data.pilot_fraction={dc.pilot_fraction} of the "
            "samples of the classes every agent observes rounds to 0 (the data set has "
            f"{len(ds.y)} samples); raise data.pilot_fraction or data.limit"
        )
    check_shards(part)
    return ds, part


def steps_per_epoch(cfg: ExperimentConfig, part: Partition) -> int:
    """Common step count: the largest shard's batches (smaller shards wrap around)."""
    if cfg.train.steps_per_epoch is not None:
        return cfg.train.steps_per_epoch
    return max(math.ceil(len(a.train) / cfg.train.batch_size) for a in part.agents)


def batch_warning(cfg: ExperimentConfig, part: Partition) -> str | None:
    """A warning when ``train.batch_size`` exceeds an agent's training shard: its batches
    are then capped at the shard (:func:`fedsheaf.algorithms.base.epoch_batches`)."""
    small = {
        i: len(a.train) for i, a in enumerate(part.agents) if len(a.train) < cfg.train.batch_size
    }
    if not small:
        return None
    shown = ", ".join(f"agent {i}: {n}" for i, n in list(small.items())[:4])
    more = f" and {len(small) - 4} more" if len(small) > 4 else ""
    return (
        f"fedsheaf: warning: train.batch_size={cfg.train.batch_size} exceeds the training "
        f"samples of {count(len(small), 'agent')} ({shown}{more}): each of their batches "
        "is capped at its training set (the numbers shown)"
    )


#: Algorithms that draw ``sheaf.pilot_batch`` pilots per step.
PILOT_BATCH_READERS = ("sheaf_frl", "fedmuscle")


def pilot_warning(cfg: ExperimentConfig, part: Partition) -> str | None:
    """A warning when ``sheaf.pilot_batch`` exceeds the shared pilot set: every step then
    uses the whole set."""
    n = len(part.pilots)
    prototypes = cfg.algorithm == "sheaf_frl" and cfg.sheaf.pilot_strategy == "prototype"
    if cfg.algorithm not in PILOT_BATCH_READERS or prototypes or cfg.sheaf.pilot_batch <= n:
        return None
    return (
        f"fedsheaf: warning: sheaf.pilot_batch={cfg.sheaf.pilot_batch} exceeds the {n} shared "
        f"pilots: capped at {n} (every step uses all of them)"
    )


def privacy_warning(cfg: ExperimentConfig) -> str | None:
    """A warning when a strict-privacy run standardises its latents feature by feature: the
    unit variances let a neighbour undo the masks up to the order and signs of the
    features (docs/privacy.md)."""
    sc = cfg.sheaf
    if cfg.algorithm != "sheaf_frl" or sc.variant != "strict" or sc.whitening != "standardize":
        return None
    return (
        "fedsheaf: warning: sheaf.variant=strict with sheaf.whitening=standardize: the unit "
        "variance of every latent feature lets a neighbour undo the masks up to the order and "
        "signs of the features (docs/privacy.md); sheaf.whitening=zca leaves no such handle"
    )


def data_warnings(cfg: ExperimentConfig, part: Partition, graph: Graph) -> list[str]:
    """What a job of this config says before training about its data and graph (and the
    privacy its settings give up)."""
    found = (
        batch_warning(cfg, part),
        pilot_warning(cfg, part),
        graph_class_warning(cfg, graph),
        privacy_warning(cfg),
    )
    return [w for w in found if w is not None]


def check_shards(part: Partition) -> None:
    """Every agent's train, val and test sets are non-empty; one message names every
    agent that lacks one (the same on every rank, so a job prints it once; checked by
    :func:`load_and_partition`)."""
    empty = [
        f"agent {i} ({', '.join(s for s in ('train', 'val', 'test') if not len(getattr(a, s)))})"
        for i, a in enumerate(part.agents)
        if not (len(a.train) and len(a.val) and len(a.test))
    ]
    if empty:
        raise ConfigError(
            f"empty private sets: {'; '.join(empty)}; use more data (raise or remove "
            "data.limit) or fewer agents"
        )


def pilot_data(ds: Dataset, part: Partition, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The shared pilot samples and labels on ``device`` (what every agent reads, never
    writes: the agents of one rank share one copy)."""
    i = torch.as_tensor(part.pilots, dtype=torch.long)
    return ds.take(i).to(device), ds.y[i].to(device)


def agent_data(
    ds: Dataset,
    part: Partition,
    agent: int,
    device: torch.device,
    pilots: tuple[torch.Tensor, ...] | None = None,
) -> AgentData:
    """Agent ``agent``'s shards and the pilots (``pilots``: :func:`pilot_data`, when the
    rank already holds them) on ``device``."""
    shard = part.agents[agent]

    def take(idx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.as_tensor(idx, dtype=torch.long)
        return ds.take(i).to(device), ds.y[i].to(device)

    (xtr, ytr), (xva, yva), (xte, yte) = (take(shard.train), take(shard.val), take(shard.test))
    x_pilot, y_pilot = pilots or pilot_data(ds, part, device)
    return AgentData(xtr, ytr, xva, yva, xte, yte, x_pilot, ds.n_classes, y_pilot)


def model_args(cfg: ExperimentConfig, agent: int) -> dict[str, Any]:
    """The keyword arguments of agent ``agent``'s model factory: for the built-in cnn its
    entry's encoder, head and dropout and ``sheaf.whitening``; else ``model_args``."""
    spec = cfg.agents[agent]
    if spec.is_cnn:
        return {
            "encoder": spec.encoder,
            "head": spec.head,
            "dropout": spec.dropout,
            "whitening": cfg.sheaf.whitening,
        }
    return dict(spec.model_args)


def agent_network(cfg: ExperimentConfig, ds: Dataset, agent: int, seed: int) -> nn.Module:
    """Agent ``agent``'s model as its config entry names it (``agents[i].model``),
    initialised from ``seed``, unchecked (on the default device: the memory estimate
    builds it on ``meta``)."""
    return build_agent(
        cfg.agents[agent].model,
        agent,
        tuple(ds.shape[1:]),
        ds.n_classes,
        model_args(cfg, agent),
        seed,
    )


def agent_model(
    cfg: ExperimentConfig,
    ds: Dataset,
    agent: int,
    device: torch.device,
    graph: Graph | None = None,
) -> AgentModel:
    """The agent's model, initialised from (seed, agent id), checked once on the CPU
    (:func:`~fedsheaf.models.registry.check_agent_model`: its latent size against the
    dim ``graph`` gives the agent's node; for a plug-in model the graph file is read when
    ``graph`` is None, the cnn's d is the config's, which :func:`build_graph` checked),
    then on ``device`` with its dropout on its own generator."""
    network = agent_network(cfg, ds, agent, derive_seed(cfg.seed, "model", agent))
    if graph is None and cfg.graph is not None and not cfg.agents[agent].is_cnn:
        graph = load_graph(cfg.graph)
    dim = graph.dims[agent] if graph is not None and agent < graph.n else None
    check_agent_model(
        network, cfg.agents[agent].model, agent, tuple(ds.shape[1:]), ds.n_classes, dim, cfg.graph
    )
    model = network.to(device)
    gen = torch.Generator(device=device).manual_seed(derive_seed(cfg.seed, "dropout", agent))
    set_dropout_generator(model, gen)
    return cast(AgentModel, model)  # (a plug-in's: any module with encode and decode)
