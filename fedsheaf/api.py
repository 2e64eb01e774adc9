"""fedsheaf's Python API: run an experiment from a script, read a finished run back, and
register one's own data set, model, partition, algorithm or aggregator. ``import
fedsheaf`` exposes these names lazily (:data:`fedsheaf.__all__`); everything else in the
package is private by convention.

The ``register_*`` decorators register under a plain name, in this process, exactly as
the built-ins are registered (:class:`fedsheaf.util.registry.Registry`). Under
``mpiexec`` every rank must import the module that registers (a script that registers
at its top and then calls :func:`run` does); a run launched as ``fedsheaf run`` imports
nothing of the user's, so there name the callable inline as ``"package.module:callable"``
or install it as an entry point of the registry's group (``docs/extending.md``).

A script that calls :func:`run` is launched as ``fedsheaf run`` is, one process per rank
(``mpiexec -n 4 python script.py``); every rank calls :func:`run` with the same arguments
and gets the same :class:`RunSummary`. MPI is initialised once, at the first call, and
left open, so a script may run several experiments one after the other.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fedsheaf.config.schema import build
from fedsheaf.config.sections import (
    ExperimentConfig,
    apply_overrides,
    error_source,
    load_config,
    read_yaml,
)
from fedsheaf.rundir.files import read_json_object, read_metrics
from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError, FedsheafError
from fedsheaf.util.registry import Registry

__all__ = [
    "Run",
    "RunSummary",
    "load_run",
    "register_aggregator",
    "register_algorithm",
    "register_dataset",
    "register_model",
    "register_partition",
    "register_server_model",
    "run",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RunSummary:
    """What one run ended with (its ``summary.json``), the same on every rank.

    Attributes
    ----------
    name, algorithm, seed:
        The run's ``name``, ``algorithm`` and ``seed``.
    run_dir:
        The run directory (``output.dir/<run name>``).
    wall_seconds:
        Training time, in seconds.
    n_agents:
        Agents of a graph-coupled run (decentralized or hub); None for a server-based run.
    n_clients:
        Clients of a server-based run; None otherwise.
    private, comm, comm_degree_weighted:
        Graph-coupled runs: the agents' mean test accuracy at the end, of their private
        models and through their neighbours' communicated representations (plain and
        degree-weighted means: ``private_acc``, ``comm_acc``, ``comm_acc_deg``); else None.
    score, score_is:
        Server-based runs: the run's headline number and what it is (``score_is``: e.g.
        "test MSE after the last round (lower is better)"); else None.
    bytes_total:
        Bytes the run's training sent (graph-coupled: ``bytes_sent_total``; server-based:
        ``bytes_up_total + bytes_down_total``).
    raw:
        Everything ``summary.json`` holds, as written.
    """

    name: str
    algorithm: str
    seed: int
    run_dir: Path
    wall_seconds: float | None
    n_agents: int | None
    n_clients: int | None
    private: float | None
    comm: float | None
    comm_degree_weighted: float | None
    score: float | None
    score_is: str | None
    bytes_total: int | None
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any], run_dir: str | Path) -> RunSummary:
        """A summary from the mapping a run wrote as ``summary.json``."""

        def number(key: str) -> float | None:
            value = summary.get(key)
            return float(value) if isinstance(value, int | float) else None

        def whole(key: str) -> int | None:
            value = summary.get(key)
            return int(value) if isinstance(value, int) else None

        if isinstance(summary.get("bytes_sent_total"), int):
            bytes_total: int | None = summary["bytes_sent_total"]
        elif isinstance(summary.get("bytes_up_total"), int):
            bytes_total = summary["bytes_up_total"] + int(summary.get("bytes_down_total", 0))
        else:
            bytes_total = None
        return cls(
            name=str(summary.get("name", "")),
            algorithm=str(summary.get("algorithm", "")),
            seed=int(summary.get("seed", 0)),
            run_dir=Path(run_dir),
            wall_seconds=number("wall_seconds"),
            n_agents=whole("n_agents"),
            n_clients=whole("n_clients"),
            private=number("private_acc"),
            comm=number("comm_acc"),
            comm_degree_weighted=number("comm_acc_deg"),
            score=number("score"),
            score_is=str(summary["score_is"]) if "score_is" in summary else None,
            bytes_total=bytes_total,
            raw=dict(summary),
        )


def _override_text(key: str, value: Any) -> str:
    """``key=value`` as ``fedsheaf run`` takes it: a string that reads back as itself is
    given as it is (``train.device=cpu``), any other value as JSON (which YAML reads)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        try:
            if yamlio.load(value) == value:
                return f"{key}={value}"
        except Exception:  # (not YAML: quoted below)
            pass
    try:
        return f"{key}={json.dumps(value)}"
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"override {key}: cannot give {value!r} as a config value: {exc}"
        ) from None


def _from_mapping(config: Mapping[str, Any], overrides: list[str]) -> ExperimentConfig:
    raw = apply_overrides(copy.deepcopy(dict(config)), overrides)
    try:
        return build(ExperimentConfig, raw)
    except ConfigError as exc:
        where = error_source(str(exc), overrides, "config mapping")
        raise ConfigError(f"{where}: {exc}") from None


def run(config: str | os.PathLike[str] | Mapping[str, Any], /, **overrides: Any) -> RunSummary:
    """Run one experiment on every rank of this process's MPI job; return its summary.

    Parameters
    ----------
    config:
        A config file's path, a preset's name (``"quickstart"``; ``fedsheaf presets``
        lists them) or the config itself as a mapping (relative paths in it, such as
        ``graph``, resolve against the current directory).
    **overrides:
        Config keys to set, as ``fedsheaf run``'s ``key=value`` overrides: ``seed=3``,
        ``**{"train.epochs": 2}``, a section as a mapping merged into it
        (``train={"epochs": 2}``), or a leaf key its section is clear from (``epochs=2``).

    Returns
    -------
    RunSummary
        The run's summary, on every rank. A run directory that holds this run finished
        already is not run again: its summary is returned (as ``fedsheaf run`` skips it).

    Raises
    ------
    ConfigError
        A user error found before training (a bad config or override, the wrong number
        of ranks, a run directory in use), on every rank with the same words. No rank
        exits: the script may catch it and carry on.
    FedsheafError
        A user error raised during training on a one-rank job. On a job of several ranks
        such an error (a diverged loss on one rank) still ends the whole job, since the
        other ranks wait for it inside MPI.
    StopRequested
        A stop on request (``fedsheaf stop``), once its checkpoint is written.
    """
    texts = [_override_text(key, value) for key, value in overrides.items()]
    if isinstance(config, Mapping):
        given = dict(config)

        def read() -> ExperimentConfig:
            return _from_mapping(given, texts)

    else:
        path = os.fspath(config)

        def read() -> ExperimentConfig:
            return load_config(path, texts)

    from fedsheaf.launch.job import run_job  # (imports torch and MPI: only when run)
    from fedsheaf.runtime.world import UserErrorExit

    try:
        _, summary, run_dir = run_job(read, library=True)
    except UserErrorExit as exc:
        raise ConfigError(exc.message or "the run was refused (see the error above)") from None
    if summary is None or run_dir is None:
        raise FedsheafError(f"the run in {run_dir} ended without a summary")
    return RunSummary.from_dict(summary, run_dir)


@dataclass(frozen=True)
class Run:
    """A run directory read back (:func:`load_run`).

    Attributes
    ----------
    path:
        The run directory.
    config:
        Its resolved config (``config.yaml``), as a mapping.
    epochs:
        One record per epoch (graph-coupled runs) or round (server-based runs) from
        ``metrics.jsonl``: its scalar fields (nested mappings flattened to ``a.b`` keys;
        per-agent lists left out). ``pandas.DataFrame(run.epochs)`` takes it as it is.
    agents:
        One record per agent and epoch: ``epoch``, ``agent`` and the agent's scalar fields
        (``private_acc``, ``comm_acc``, ``degree``, ...; per-neighbour maps left out).
        Empty for runs whose records hold no per-agent lists (server-based runs).
    summary:
        ``summary.json``, or None while the run is unfinished.
    """

    path: Path
    config: dict[str, Any]
    epochs: list[dict[str, Any]]
    agents: list[dict[str, Any]]
    summary: dict[str, Any] | None


def _scalars(record: Mapping[str, Any], prefix: str = "", nested: bool = True) -> dict[str, Any]:
    """The scalar fields of ``record``; with ``nested``, nested mappings flattened to dotted
    keys too."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if nested:
                out.update(_scalars(value, f"{name}."))
        elif value is None or isinstance(value, bool | int | float | str):
            out[name] = value
    return out


def load_run(run_dir: str | os.PathLike[str]) -> Run:
    """Read a run directory: its config, per-epoch and per-agent metrics, and summary.

    Works on a finished run and on one still running or stopped (whose ``summary`` is
    None). Raises :class:`ConfigError` when ``run_dir`` holds no fedsheaf run.
    """
    path = Path(run_dir)
    if not (path / "config.yaml").is_file():
        raise ConfigError(f"{path} is not a fedsheaf run directory (no config.yaml in it)")
    config = read_yaml(path / "config.yaml")
    metrics = path / "metrics.jsonl"
    records = read_metrics(metrics) if metrics.is_file() else []
    epochs = [_scalars(r) for r in records]
    agents: list[dict[str, Any]] = []
    for record in records:
        step: dict[str, Any] = {k: record[k] for k in ("epoch", "round") if k in record}
        for i, agent in enumerate(record.get("agents") or []):
            if isinstance(agent, Mapping):
                fields = _scalars(agent, nested=False)  # (per-neighbour maps differ)
                fields.pop("agent", None)
                agents.append({**step, "agent": agent.get("agent", i), **fields})
    summary_path = path / "summary.json"
    summary = read_json_object(summary_path) if summary_path.is_file() else None
    return Run(path=path, config=config, epochs=epochs, agents=agents, summary=summary)


def register_aggregator(name: str) -> Callable[[F], F]:
    """Register a server aggregator (a class or factory) under ``name``, in this process.

    A config then names it as ``federated.aggregator: <name>``; the factory is called with
    ``federated.aggregator_args`` as keyword arguments and returns an object with
    ``aggregate(global_params, updates, counts, round_)`` (e.g. a subclass of
    ``fedsheaf.algorithms.federated.aggregators.base.Aggregator``)::

        @fedsheaf.register_aggregator("clipped_mean")
        class ClippedMean(Aggregator): ...

    The registration holds in this process only: under ``mpiexec`` every rank must import
    the module that registers it (a script that registers at its top does). Without that,
    name it inline as ``"package.module:callable"`` or install it as an entry point of the
    group ``fedsheaf.aggregators``. Raises ValueError for a name taken or not a plain word.
    """
    from fedsheaf.algorithms.federated.aggregators import AGGREGATORS

    def register(factory: F) -> F:
        AGGREGATORS.register(name, factory)
        return factory

    return register


def _registering(registries: list[Registry], name: str) -> Callable[[F], F]:
    """A decorator registering its factory under ``name`` in each of ``registries``
    (ValueError, before any is changed, when ``name`` is taken or not a plain word)."""

    def register(factory: F) -> F:
        for registry in registries:
            if name in registry.builtin:
                raise ValueError(f"{registry.kind} {name!r} is registered twice")
        for registry in registries:
            registry.register(name, factory)
        return factory

    return register


def register_dataset(name: str) -> Callable[[F], F]:
    """Register a data set's loader under ``name`` (config key ``data.dataset``), in this
    process.

    The loader is called on every rank as ``load(root, split, download,
    **data.dataset_args)``: ``root`` is ``data.root`` made absolute, ``split`` is
    ``"train"`` or ``"test"``, ``download`` is ``data.download``. It returns ``(x, y)``,
    ``(x, y, n_classes)`` or a map-style ``torch.utils.data.Dataset`` of ``(x, y)``
    items: ``x`` images ``(N, C, H, W)`` or vectors ``(N, F)``, ``y`` integer labels
    ``0..n_classes-1``::

        @fedsheaf.register_dataset("blobs")
        def blobs(root, split, download, n=600):
            ...
            return x, y

    Registered in this process only (see :mod:`fedsheaf.api`); otherwise name it as
    ``"package.module:callable"`` or install it as an entry point of the group
    ``fedsheaf.datasets``. Raises ValueError for a name taken or not a plain word.
    """
    from fedsheaf.data.datasets_registry import DATASETS

    return _registering([DATASETS], name)


def register_model(name: str) -> Callable[[F], F]:
    """Register an agent model's factory under ``name`` (config key ``agents[i].model``),
    in this process.

    The factory is called as ``fn(input_shape, n_classes, **agents[i].model_args)`` (with
    ``seed=`` too if it takes one) and returns an ``nn.Module`` with ``encode(x) -> (B,
    d)`` (d: the graph file's dim of the agent's node) and ``decode(z) -> (B,
    n_classes)`` logits; dropout in it must be :class:`GeneratorDropout`::

        @fedsheaf.register_model("mlp")
        class MLP(torch.nn.Module): ...

    Registered in this process only (see :mod:`fedsheaf.api`); otherwise name it as
    ``"package.module:callable"`` or install it as an entry point of the group
    ``fedsheaf.models``. Raises ValueError for a name taken or not a plain word.
    """
    from fedsheaf.models.registry import AGENT_MODELS

    return _registering([AGENT_MODELS], name)


def register_server_model(name: str) -> Callable[[F], F]:
    """Register a server-based run's model factory under ``name`` (config key
    ``federated.model``), in this process.

    The factory is called as ``fn(input_shape, n_classes, **federated.model_args)`` and
    returns an ``nn.Module`` with ``representation(x) -> (B, r)`` and a head submodule
    named by its class attribute ``HEAD`` (default ``"head"``), ``forward(x) ==
    head(representation(x))``; the body (shared by FedRep and FedPer) is every
    parameter outside the head::

        @fedsheaf.register_server_model("mlp")
        class ServerMLP(torch.nn.Module):
            HEAD = "head"
            ...

    Registered in this process only (see :mod:`fedsheaf.api`); otherwise name it as
    ``"package.module:callable"`` or install it as an entry point of the group
    ``fedsheaf.server_models``. Raises ValueError for a name taken or not a plain word.
    """
    from fedsheaf.models.registry import SERVER_MODELS

    return _registering([SERVER_MODELS], name)


def register_partition(name: str) -> Callable[[F], F]:
    """Register a partition under ``name`` for both families: graph runs
    (``data.partition``) and server-based runs (``federated.partition``), in this process.

    It is called as ``fn(labels, n_parties, seed=seed, **partition_args)`` and returns
    ``n_parties`` pairwise disjoint integer index arrays into ``labels``::

        @fedsheaf.register_partition("halves")
        def halves(labels, n_parties, seed=0): ...

    Registered in this process only (see :mod:`fedsheaf.api`); otherwise name it as
    ``"package.module:callable"`` or install it as an entry point of the group
    ``fedsheaf.partitions``. Raises ValueError for a name taken (in either family) or
    not a plain word.
    """
    from fedsheaf.data.partitions_registry import GRAPH_PARTITIONS, SERVER_PARTITIONS

    return _registering([GRAPH_PARTITIONS, SERVER_PARTITIONS], name)


def register_algorithm(name: str) -> Callable[[F], F]:
    """Register a decentralized algorithm under ``name`` (config key ``algorithm``), in
    this process.

    It is called on every rank as ``factory(agent, nbr, reporter, **algorithm_args)`` and
    returns a ``fedsheaf.algorithms.base.DecentralizedAlgorithm``: typically it is a
    subclass of one (or of a built-in, such as
    ``fedsheaf.algorithms.noncoop.NonCooperative``) that overrides a hook::

        @fedsheaf.register_algorithm("proximal")
        class Proximal(NonCooperative):
            def regulariser(self, epoch, step): ...

    Registered in this process only (see :mod:`fedsheaf.api`); otherwise name it as
    ``"package.module:callable"`` or install it as an entry point of the group
    ``fedsheaf.algorithms``. Raises ValueError for a name taken (a built-in method's
    too) or not a plain word.
    """
    from fedsheaf.algorithms.registry import ALGORITHMS_REGISTRY

    return _registering([ALGORITHMS_REGISTRY], name)
