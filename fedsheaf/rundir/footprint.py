"""A rough estimate of a rank's peak memory, from the config, before a job starts.

``fedsheaf check`` prints it and warns when it exceeds the memory a node can give each of
its ranks. A rank holding several agents (a decentralized run on fewer ranks than
agents) adds up its agents' models, activations and own data, with torch and the stored
data set once (:func:`placed_footprint`). The estimate adds, for the rank that needs most:

* **torch and the libraries** (:data:`TORCH_BASELINE`, a measured constant): ``import
  torch`` (0.72 GB on the CPU build, 0.43 GB of it library files), the first optimizer
  step (0.16 GB: it imports ``torch._dynamo``), mpi4py and scikit-learn (0.1 GB;
  scikit-learn's 0.07 GB only where a data set imports it, as ``head.data=diabetes3``
  does: the digits are read from its file without it), measured with ``getrusage``
  (``results/bench/README.md``, "Memory");
* **model**: parameters, their gradients and the optimizer's state (momentum: one more
  copy, Adam: two), float32, counted on a model built on the ``meta`` device (no
  memory), plus its buffers;
* **activations**: the outputs of every layer for one sample (a ``meta`` forward with
  hooks) times the samples of one training step (the private batch as capped at the
  training set, plus the step's pilots), twice (the forward's saved tensors and the
  backward's gradients); or an evaluation chunk of 1,024 samples, without gradients,
  if that is more;
* **data**: the data set split as stored (every rank holds it) and the rank's own rows
  as float32 (its shards, the pilots), plus one batch's float copy;
* **pilot window** (Sheaf-FRL with ``sheaf.window``): the per-batch cross-products
  ``d_i × d_j`` (float64) the window keeps for each neighbour.

It is meant to be right within a factor of about 2 (the quickstart: estimated 1.0 GB,
measured 1.03 GB a rank); allocator caches, fragmentation and the CUDA context are not in it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedsheaf.algorithms.base import AgentData
from fedsheaf.config.sections import ExperimentConfig, TrainConfig
from fedsheaf.data.partition import Partition
from fedsheaf.data.sources import Dataset
from fedsheaf.graphs import Graph
from fedsheaf.models.seeded import set_dropout_generator
from fedsheaf.runtime.experiment import PILOT_BATCH_READERS, agent_network
from fedsheaf.sheaf.maps import window_batches
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.units import human_bytes

#: Resident memory of a rank before its own data and models: torch, mpi4py and the data
#: libraries, after the first optimizer step (measured on the CPU build; see the module
#: docstring).
TORCH_BASELINE = 980_000_000
#: Samples per evaluation chunk (``DecentralizedAlgorithm.latents``).
EVAL_CHUNK = 1024
FLOAT = 4


@dataclass(frozen=True)
class Footprint:
    """Bytes one rank needs, by part (:data:`TORCH_BASELINE` comes on top)."""

    model: int
    activations: int
    data: int
    window: int = 0
    rank: str = ""
    #: the part of ``activations`` a training step holds (evaluation runs one agent of a
    #: rank at a time)
    step: int = 0
    #: the part of ``step`` an agent still holds while the other agents of its rank take
    #: their turns (:func:`held_across_meetings`)
    held: int = 0

    @property
    def total(self) -> int:
        return TORCH_BASELINE + self.model + self.activations + self.data + self.window

    def describe(self) -> str:
        """``estimated peak memory per rank ~1.01 GB (torch and libraries 0.98 GB, model …,
        activations …, data …; agent 2, the rank that needs most)``."""
        parts = [
            f"torch and libraries {human_bytes(TORCH_BASELINE)}",
            f"model {human_bytes(self.model)}",
            f"activations {human_bytes(self.activations)}",
            f"data {human_bytes(self.data)}",
        ]
        if self.window:
            parts.append(f"pilot window {human_bytes(self.window)}")
        text = f"estimated peak memory per rank ~{human_bytes(self.total)} ({', '.join(parts)}"
        return text + (f"; {self.rank}, the rank that needs most)" if self.rank else ")")


def optimizer_copies(tc: TrainConfig) -> int:
    """Copies of the parameters the optimizer keeps: Adam 2, SGD with momentum 1."""
    if tc.optimizer == "adam":
        return 2
    return 1 if tc.momentum > 0 else 0


def model_bytes(model: nn.Module, tc: TrainConfig) -> int:
    """Parameters, gradients and optimizer state (float32), and the buffers."""
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params * FLOAT * (2 + optimizer_copies(tc)) + buffers


def activation_floats(model: nn.Module, sample: tuple[int, ...]) -> tuple[int, int]:
    """(all layers' outputs, the largest one) for one sample of shape ``sample``: a
    forward of two samples (batch norm needs more than one) on a ``meta`` copy of
    ``model``, which allocates nothing."""
    meta = model if _on_meta(model) else copy.deepcopy(model).to("meta")
    sizes: list[int] = []

    def hook(_module: nn.Module, _inputs: object, out: object) -> None:
        if isinstance(out, torch.Tensor) and out.dim() > 0:
            sizes.append(out[0].numel())

    leaves = [m for m in meta.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        meta.train()
        with torch.no_grad():
            meta(torch.empty((2, *sample), device="meta"))
    finally:
        for h in handles:
            h.remove()
    return sum(sizes), max(sizes, default=0)


def _per_sample(model: nn.Module, sample: tuple[int, ...]) -> tuple[int, int]:
    """:func:`activation_floats`, or nothing for a model that cannot run on meta tensors
    (its activations are then left out of the estimate rather than stopping the check)."""
    try:
        return activation_floats(model, sample)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return 0, 0


def _on_meta(model: nn.Module) -> bool:
    return any(p.device.type == "meta" for p in model.parameters())


def _nbytes(tensors: Iterable[torch.Tensor | None]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def step_activations(per_sample: tuple[int, int], samples: int, eval_rows: int) -> int:
    """Bytes of the activations of a training step of ``samples`` samples (saved tensors
    and their gradients), or of an evaluation chunk if more."""
    total, largest = per_sample
    train = 2 * total * samples * FLOAT
    evaluation = 2 * largest * min(EVAL_CHUNK, max(eval_rows, 1)) * FLOAT
    return max(train, evaluation)


def agent_footprint(
    cfg: ExperimentConfig,
    ds: Dataset,
    part: Partition,
    graph: Graph,
    agent: int,
    data: AgentData,
    steps: int,
) -> Footprint:
    """The footprint of the rank of ``agent`` in a decentralized or hub run (``data``: its
    tensors, as :func:`fedsheaf.runtime.experiment.agent_data` gives them; ``steps``: per
    epoch)."""
    model = _EncodeDecode(_agent_network(cfg, ds, agent))
    set_dropout_generator(model, torch.Generator())
    sample = tuple(ds.shape[1:])
    n_train, n_pilots = len(part.agents[agent].train), len(part.pilots)
    batch = min(cfg.train.batch_size, n_train)
    pilots = min(cfg.sheaf.pilot_batch, n_pilots) if cfg.algorithm in PILOT_BATCH_READERS else 0
    if cfg.algorithm == "sheaf_frl" and cfg.sheaf.pilot_strategy in ("prototype", "kmeans"):
        pilots = n_pilots  # (an upper bound: the group members encoded each step)
    eval_rows = max(len(data.y_test), len(data.y_val), n_pilots)
    per_sample = _per_sample(model, sample)
    acts = step_activations(per_sample, batch + pilots, eval_rows)
    sample_bytes = math.prod(sample) * FLOAT
    own = [v for v in vars(data).values() if isinstance(v, torch.Tensor)]
    held = _nbytes([ds.pixels, ds.y, *own])
    copies = (batch + pilots) * sample_bytes  # the step's gathered batch and pilots
    step = step_activations(per_sample, batch + pilots, 1)
    return Footprint(
        model=model_bytes(model, cfg.train),
        activations=acts,
        data=held + copies,
        window=window_bytes(cfg, graph, agent, pilots, steps),
        rank=f"agent {agent}",
        step=step,
        held=held_across_meetings(cfg, step, step_activations(per_sample, pilots, 1)),
    )


def held_across_meetings(cfg: ExperimentConfig, step: int, pilot_graph: int) -> int:
    """What of a training step's activations (``step``) an agent sharing a rank keeps
    while the rank's other agents take their turns: Sheaf-FRL back-propagates the
    private batch before it meets them and keeps only its pilot forward's graph
    (``pilot_graph``), or none with ``sheaf.recompute_pilots``; with
    ``sheaf.fused_pilots`` (one graph) and for the other methods, the whole step (an
    upper bound)."""
    if cfg.algorithm != "sheaf_frl" or cfg.sheaf.fused_pilots:
        return step
    return 0 if cfg.sheaf.recompute_pilots else pilot_graph


class _EncodeDecode(nn.Module):
    """An agent's model run as training runs it, ``decode(encode(x))`` (a plug-in agent
    model need not have a ``forward``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.decode(self.model.encode(x))  # type: ignore[operator]


def _agent_network(cfg: ExperimentConfig, ds: Dataset, agent: int) -> nn.Module:
    """Agent ``agent``'s model built on ``meta`` (no memory); a plug-in model that cannot
    be built there is built on the CPU (as ``fedsheaf check`` builds it next anyway)."""
    try:
        with torch.device("meta"):
            return agent_network(cfg, ds, agent, seed=0)
    except ConfigError:
        if cfg.agents[agent].is_cnn:
            raise
    return agent_network(cfg, ds, agent, seed=0)  # (its errors are the model's own)


def window_bytes(cfg: ExperimentConfig, graph: Graph, agent: int, pilots: int, steps: int) -> int:
    """What Sheaf-FRL's pilot window keeps for ``agent``'s edges: one float64
    ``d_i × d_j`` cross-product per neighbour, per batch of a ``sheaf.window`` (at most an
    epoch's ``steps`` batches when the maps are refitted every epoch)."""
    if cfg.algorithm != "sheaf_frl":
        return 0
    kept = window_batches(cfg.sheaf.window, max(pilots, 1)) or 1
    if cfg.sheaf.map_refresh == "epoch":
        kept = min(kept, steps)
    d = graph.dims[agent]
    return sum(kept * d * graph.dims[j] * 8 for j in graph.neighbours(agent))


def stored_bytes(ds: Dataset) -> int:
    """The data set split as stored: a rank holds it once, whatever agents it holds."""
    return _nbytes([ds.pixels, ds.y])


def placed_footprint(
    each: Sequence[Footprint], placement: Sequence[Sequence[int]], shared: int
) -> Footprint:
    """The footprint of the rank that needs most when ``placement`` (every rank's agent
    ids, :func:`fedsheaf.graphs.place_agents`) puts several agents on a rank.

    ``each``: every agent's :func:`agent_footprint` by id; ``shared``: the bytes of the
    stored data set in each (:func:`stored_bytes`). A rank holds torch and the stored
    data set once, and its agents' models, own data and pilot windows side by side; its
    agents take turns, so one agent's whole step meets what the others hold across
    their meetings (:func:`held_across_meetings`), while an evaluation chunk's
    activations are one agent's at a time.
    """
    ranks = []
    for r, agents in enumerate(placement):
        fps = [each[i] for i in agents]
        if len(fps) == 1:
            ranks.append(fps[0])
            continue
        ranks.append(
            Footprint(
                model=sum(f.model for f in fps),
                activations=max(
                    max(f.activations for f in fps),
                    sum(f.held for f in fps) + max(f.step - f.held for f in fps),
                ),
                data=shared + sum(f.data - shared for f in fps),
                window=sum(f.window for f in fps),
                rank=f"rank {r} ({len(fps)} agents)",
            )
        )
    return max(ranks, key=lambda f: f.total)


def graph_footprint(
    cfg: ExperimentConfig,
    ds: Dataset,
    part: Partition,
    graph: Graph,
    data: list[AgentData],
    steps: int,
) -> Footprint:
    """The largest of the agents' footprints (one rank per agent)."""
    each = [agent_footprint(cfg, ds, part, graph, i, d, steps) for i, d in enumerate(data)]
    return max(each, key=lambda f: f.total)


def worker_footprint(
    cfg: ExperimentConfig,
    model: nn.Module,
    client: object,
    held_clients: int,
    splits: Iterable[object],
) -> Footprint:
    """A server-based run's worker rank: the model, one client's step, and the data of the
    ``held_clients`` clients it holds (``client``: one client's tensors, as
    ``Task.load_clients`` gives them) beside the data set splits as stored."""
    x = getattr(client, "x_train", None)
    tensors = [v for v in vars(client).values() if isinstance(v, torch.Tensor)]
    if not isinstance(x, torch.Tensor) or len(x) == 0:
        return Footprint(model_bytes(model, cfg.train), 0, _nbytes(tensors) * held_clients)
    batch = min(cfg.train.batch_size, len(x))
    sample = tuple(x.shape[1:])
    per_sample = _per_sample(model, sample)
    stored = _nbytes(
        t
        for split in splits
        for t in (getattr(split, "pixels", None), getattr(split, "y", None))
        if isinstance(t, torch.Tensor)
    )
    return Footprint(
        model=model_bytes(model, cfg.train),
        activations=step_activations(per_sample, batch, len(x)),
        data=stored + _nbytes(tensors) * held_clients + batch * math.prod(sample) * FLOAT,
        rank="a worker",
    )


def refuse_unbuildable(
    fp: Footprint, available: int | None, key: str, narrow: str | None = None
) -> None:
    """Refuse a model whose parameters, gradients and optimizer state alone exceed the
    ``available`` memory: building it (as ``fedsheaf check`` does, on the CPU) would fail.
    ``key``: the config key of the model (``agents[0]``); ``narrow``: the keys that size
    it (default: the cnn's ``encoder`` and ``head``)."""
    if available is not None and fp.model > available:
        raise ConfigError(
            f"{key}: the model needs {human_bytes(fp.model)} for its parameters, gradients "
            f"and optimizer state, more than the {human_bytes(available)} this machine has "
            f"available; narrow {narrow or f'{key}.encoder or {key}.head'}"
        )


def memory_warning(
    fp: Footprint, n_ranks: int, available: int | None, per_node: int | None, given: bool
) -> str | None:
    """A warning when ``fp`` exceeds a node's memory over its ranks.

    ``available``: the node's memory in bytes (``given``: from ``--node-memory``, else this
    machine's available memory); ``per_node``: the ranks on a node (None: all
    ``n_ranks`` on one node, which the warning then says it assumed).
    """
    if available is None:
        return None
    ranks = per_node if per_node is not None else n_ranks
    share = available / max(ranks, 1)
    if fp.total <= share:
        return None
    source = "the node memory given" if given else "this machine's available memory"
    assumed = "" if per_node is not None else ", all on one node"
    return (
        f"fedsheaf: warning: estimated peak memory per rank ~{human_bytes(fp.total)} exceeds "
        f"{human_bytes(share)} a rank ({source}, {human_bytes(available)}, over "
        f"{ranks} ranks{assumed}): the job may run out of memory; lower train.batch_size, "
        "the model widths or the ranks per node (--ranks-per-node, --node-memory to check "
        "for another node)"
    )
