"""What a run checks before it trains, without MPI: the rank count, graph, data, shards,
algorithm set-up and models, and the run directory.

The job drivers (:mod:`fedsheaf.launch`) runs these checks collectively
on its ranks; ``fedsheaf check`` runs the same ones in one process for a given rank
count, so that a batch job's config can be checked on a login node before it queues.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedsheaf.algorithms import HUB_AGENTS, algorithm_factory, build_offline, check_algorithm
from fedsheaf.algorithms.base import Agent
from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.aggregators import make_aggregator
from fedsheaf.algorithms.federated.protocol import n_selected
from fedsheaf.config.sections import ExperimentConfig, load_config
from fedsheaf.data.sources import Dataset, data_digest
from fedsheaf.graphs import Graph, describe_placement, load_graph, place_agents
from fedsheaf.rundir import checkpoint, footprint, run_lock, tensorboard
from fedsheaf.rundir.files import (
    RUN_FILES,
    check_not_foreign,
    check_run_files,
    read_metrics,
    read_only,
    refuse_finished,
    unwritable,
)
from fedsheaf.rundir.resume import (
    GRAPH_COPY,
    check_resume,
    check_same_data,
    load_run_config,
    resume_changes,
    resume_config,
)
from fedsheaf.runtime import experiment
from fedsheaf.util.errors import CheckpointError, ConfigError
from fedsheaf.util.hostinfo import available_memory_bytes, singleton_hint
from fedsheaf.util.units import count


def run_config(
    config_path: str | None,
    overrides: list[str],
    resume_dir: str | None,
    command: str = "fedsheaf run",
) -> ExperimentConfig:
    """The config of ``fedsheaf run CONFIG [overrides]`` or ``fedsheaf run --resume RUN_DIR
    [overrides]`` (and of ``fedsheaf check``)."""
    if resume_dir is not None and config_path is not None and "=" in config_path:
        overrides, config_path = [config_path, *overrides], None  # argparse took an override
    if resume_dir is None and config_path is None:
        raise ConfigError(f"{command} needs a CONFIG file or --resume RUN_DIR")
    if resume_dir is not None and config_path is not None:
        raise ConfigError(f"give a CONFIG file or --resume RUN_DIR, not both ({config_path})")
    if resume_dir is not None:
        return resume_config(resume_dir, overrides)
    assert config_path is not None  # (refused above when both are None)
    return load_config(config_path, overrides)


def run_length(cfg: ExperimentConfig) -> tuple[int, str, str]:
    """How long ``cfg``'s run is: (count, unit, the config key that sets it)."""
    if cfg.decentralized or cfg.hub_based:
        return cfg.train.epochs, "epoch", "train.epochs"
    return cfg.federated.rounds, "round", "federated.rounds"


def per_round(cfg: ExperimentConfig) -> int:
    """How many clients train in each round of a server-based run (every one for Local)."""
    fc = cfg.federated
    return n_selected(fc.clients, FEDERATED[cfg.algorithm](fc).participation())


def hub_graph(cfg: ExperimentConfig, n_ranks: int) -> Graph:
    """FedProto, FedMuscle: the graph, checked against a job of one rank per agent plus
    the server's."""
    assert cfg.graph is not None  # ExperimentConfig.check requires it of hub runs
    n = load_graph(cfg.graph).n
    if n_ranks != n + 1:
        raise ConfigError(
            f"algorithm {cfg.algorithm} needs one rank per agent (its agents do not share "
            "ranks) plus a server rank: "
            f"launch with mpiexec -n {n + 1} (the job has {count(n_ranks, 'rank')})"
            + singleton_hint(n_ranks)
        )
    return experiment.build_graph(cfg, n)


def describe_graph_run(cfg: ExperimentConfig, graph: Graph, ds: Dataset, steps: int) -> str:
    """A decentralized (or hub) run in words: the start of its first log line."""
    return (
        f"{cfg.algorithm} '{cfg.name}' on {graph.name} ({count(graph.n, 'agent')}, "
        f"{count(len(graph.edges), 'edge')}), {ds.name} "
        f"{_partition_words(cfg)}, {count(cfg.train.epochs, 'epoch')} x {count(steps, 'step')}"
    )


def _partition_words(cfg: ExperimentConfig) -> str:
    """``s=0.7`` (Eq. 23's label shift), ``Dirichlet(α=0.5)`` or the partition's name."""
    ref = cfg.data.partition.strip()
    if ref == "label_shift":
        return f"s={cfg.data.shift}"
    return f"Dirichlet(α={cfg.data.dirichlet_alpha:g})" if ref == "dirichlet" else ref


#: Ranks :func:`describe_ranks` lists one by one; the rest are counted.
RANKS_LISTED = 16


def describe_ranks(
    graph: Graph, placement: Sequence[Sequence[int]], strategy: str = "contiguous"
) -> list[str]:
    """A graph run's placement in words: the summary
    (:func:`fedsheaf.graphs.describe_placement`), then, when ranks hold several agents,
    which agents each rank holds and the graph edges between each pair of ranks (what
    crosses MPI: one neighbourhood collective per exchange over these rank pairs)."""
    lines = [f"placement: {describe_placement(graph, placement, strategy)}"]
    if len(placement) == graph.n:
        if graph.n > 1:
            lines[0] += (
                f" (the config takes 1 to {graph.n} ranks; fewer hold several agents each: "
                "check them with -n R)"
            )
        return lines
    for r, agents in enumerate(placement[:RANKS_LISTED]):
        lines.append(f"rank {r}: agents {_id_ranges(agents)}")
    if len(placement) > RANKS_LISTED:
        lines.append(f"(and {count(len(placement) - RANKS_LISTED, 'rank')} more)")
    owner = {i: r for r, agents in enumerate(placement) for i in agents}
    between = Counter(
        tuple(sorted((owner[i], owner[j]))) for i, j in graph.edges if owner[i] != owner[j]
    )
    if not between:
        lines.append("no graph edge between ranks: nothing crosses MPI")
        return lines
    pairs = [f"{a}-{b} ({count(k, 'edge')})" for (a, b), k in sorted(between.items())]
    shown = ", ".join(pairs[:RANKS_LISTED])
    more = f" and {len(pairs) - RANKS_LISTED} more pairs" if len(pairs) > RANKS_LISTED else ""
    lines.append(f"edges between ranks (rank pairs that exchange): {shown}{more}")
    return lines


def _id_ranges(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2, 5, 7-8"``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def describe_server_run(
    cfg: ExperimentConfig, n_workers: int, task: str, placement: str = ""
) -> str:
    """A server-based run in words (``task``: its task's description, ``placement``:
    what follows the worker count): the start of its first log line."""
    fc = cfg.federated
    return (
        f"{cfg.algorithm} '{cfg.name}': {fc.clients} clients on "
        f"{count(n_workers, 'worker rank')}{placement}, {task}, "
        f"{count(per_round(cfg), 'client')} per round, {count(fc.rounds, 'round')}"
    )


def ignored_warning(cfg: ExperimentConfig) -> str | None:
    """The start-up warning naming the settings ``cfg``'s algorithm never reads."""
    ignored = cfg.ignored_settings()
    if not ignored:
        return None
    return f"fedsheaf: warning: {cfg.algorithm} does not read " + "; ".join(ignored)


def finished_note(cfg: ExperimentConfig) -> str | None:
    """What to say instead of running, when ``cfg`` resumes a run that has already
    finished at its length (a requeued batch job, a job-array line run again)."""
    path = Path(cfg.output.dir) / cfg.run_name()
    if not (cfg.checkpoint.resume and (path / "summary.json").is_file()):
        return None
    try:
        saved = load_run_config(path / "config.yaml")
    except ConfigError:
        return None  # check_run_dir says what is wrong
    done, unit, key = run_length(saved)
    wanted = run_length(cfg)[0]
    if resume_changes(saved, cfg, path / GRAPH_COPY) or wanted > done:
        return None  # another experiment (check_run_dir says so), or to be trained longer
    asked = "" if wanted == done else f", more than the {wanted} asked for"
    return (
        f"fedsheaf: {path} has already finished its {count(done, unit)}{asked}; nothing to "
        f"do (to train it longer, resume it with {key} greater than {done})"
    )


def check_run_dir(cfg: ExperimentConfig, path: Path) -> None:
    """Refuse to start over an unfinished run by accident, to write into a directory
    that is not a run's, or to resume another experiment. Changes nothing."""
    check_not_foreign(path)
    check_run_files(path)
    if not cfg.checkpoint.resume:
        if not cfg.output.overwrite:
            checkpoint.refuse_unfinished(path)
    elif (path / "config.yaml").is_file():
        saved = check_resume(path, cfg)
        if (path / "summary.json").exists():
            extend_finished(path, saved, cfg)
    elif (path / "summary.json").exists():
        raise ConfigError(
            f"run directory {path} holds a finished run without its config.yaml, so it "
            "cannot be resumed or extended; choose another output.name or pass "
            "output.overwrite=true"
        )
    refuse_finished(path, cfg.output.overwrite, cfg.checkpoint.resume)


def extend_finished(path: Path, saved: ExperimentConfig, cfg: ExperimentConfig) -> None:
    """Resuming the finished run in ``path`` (saved with ``saved``) under ``cfg``, which
    asks for a greater length (:func:`finished_note` ends the others): refuse unless it
    has a checkpoint to continue from (else it would silently train again from the
    start). Nothing in ``path`` changes here: the runtime's ``settle_config`` sets the
    summary aside once a checkpoint has been read on every rank.

    Training from the last checkpoint on is that of a run asked for the greater length
    from the start (evaluation leaves the training state alone); the metrics differ only
    where the shorter run evaluated its last epoch (round), which it always does.
    """
    key, wanted = run_length(saved)[2], run_length(cfg)[0]
    if not (checkpoint.checkpoints_dir(path) / checkpoint.MANIFEST).is_file():
        raise ConfigError(
            f"{path} is a finished run with no checkpoint to continue from (it ran with "
            f"checkpoint.every={saved.checkpoint.every}); run it again with {key}={wanted} "
            "and output.overwrite=true"
        )


def resumable(cfg: ExperimentConfig, path: Path, n_ranks: int) -> list[checkpoint.Checkpoint]:
    """The checkpoints the manifest of ``path`` names, written by a job of ``n_ranks``
    (a decentralized run's: by a job of any rank count), newest first (one that lost a
    file is then refused with a word, not skipped:
    :func:`fedsheaf.rundir.checkpoint.load_rank`); refuse one with all its files past the
    run's length (the run would end before it started), or a finished run with none to
    continue from."""
    length, unit, key = run_length(cfg)
    found = checkpoint.listed(path, n_ranks, len(cfg.agents) if cfg.decentralized else None)
    whole = [c for c in found if checkpoint.missing_file(c) is None]
    if not whole and (path / "summary.json").exists():
        why = f" ({checkpoint.missing_file(found[0])} is missing)" if found else ""
        raise CheckpointError(
            f"cannot extend the finished run {path}: it holds no complete "
            f"checkpoint to continue from{why}; start over with output.overwrite=true"
        )
    if whole and whole[0].epoch > length:
        raise CheckpointError(
            f"cannot resume {path}: it is checkpointed after {unit} "
            f"{whole[0].epoch}, past the {length} {unit}s asked for; resume with "
            f"{key} >= {whole[0].epoch}"
        )
    return found


def refuse_unevaluated_end(run_path: Path, history: list[dict[str, Any]], length: int) -> None:
    """Refuse to end a resumed run at an epoch its checkpoint holds no evaluation of.

    A run shortened on resume to the epoch of its checkpoint (one stopped early, then
    asked to end there) would train nothing more, and its summary would report an older
    epoch's accuracies as the final ones.
    """
    if not checkpoint.unevaluated(history, range(length, length + 1), "epoch", "private_acc"):
        return
    older = [r["epoch"] for r in history if "private_acc" in r]
    would = f"report epoch {older[-1]}'s accuracies as the final ones" if older else "hold none"
    raise CheckpointError(
        f"cannot end {run_path} at epoch {length}: its checkpoint there was taken without "
        f"an evaluation (epoch {length} was not its last), so its summary would {would}; "
        f"resume with train.epochs greater than {length}"
    )


@dataclass
class Verdict:
    """What ``fedsheaf check`` found: the run in words, its warnings, what it would do."""

    run: str
    warnings: list[str]
    action: str
    #: the largest rank's estimated memory (:mod:`fedsheaf.rundir.footprint`)
    memory: footprint.Footprint | None = None
    #: a graph run's placement in words, a line each (:func:`describe_ranks`)
    placement: list[str] = field(default_factory=list)


def check_job(cfg: ExperimentConfig, n_ranks: int) -> Verdict:
    """Everything a job of ``n_ranks`` would check before its first step, in one process,
    in the job's order (once :func:`finished_note` has found nothing to say): the rank
    count, the graph, the data files, partition and shards, the algorithm and every model,
    and the run directory (read, never written). Raises the error the job would stop with."""
    cpu = torch.device("cpu")
    warnings = [ignored_warning(cfg)]
    path = Path(cfg.output.dir) / cfg.run_name()
    if cfg.decentralized:  # the job resolves it first, as it reads the config
        algorithm_factory(cfg)
    check_run_path(cfg, path, hold=False)  # the job checks it first, before any data
    placed: list[str] = []
    if cfg.decentralized or cfg.hub_based:
        graph = hub_graph(cfg, n_ranks) if cfg.hub_based else experiment.build_graph(cfg, n_ranks)
        # (a hub run's agents each have a rank of their own, whatever the key says)
        blocks = place_agents(graph, graph.n if cfg.hub_based else n_ranks, cfg.train.placement)
        placed = describe_ranks(graph, blocks, cfg.train.placement) if cfg.decentralized else []
        ds, part = experiment.load_and_partition(cfg)
        fingerprint_data(cfg, data_digest(ds), path)
        steps = experiment.steps_per_epoch(cfg, part)
        each: list[footprint.Footprint] = []
        for agent in range(graph.n):
            data = experiment.agent_data(ds, part, agent, cpu)
            if agent == 0:  # (what it checks, the pilots, is the same on every agent)
                if cfg.hub_based:
                    HUB_AGENTS[cfg.algorithm].check(cfg, data)
                else:
                    check_algorithm(cfg, data)
            mine = footprint.agent_footprint(cfg, ds, part, graph, agent, data, steps)
            each.append(mine)
            footprint.refuse_unbuildable(
                mine,
                available_memory_bytes(),
                f"agents[{agent}]",
                None if cfg.agents[agent].is_cnn else f"the model of agents[{agent}].model_args",
            )
            model = experiment.agent_model(cfg, ds, agent, cpu, graph)
            if agent == 0 and cfg.decentralized:  # a plug-in: built once, without neighbours
                build_offline(Agent(agent, cfg, graph, data, model, cpu, steps))
        memory: footprint.Footprint | None = footprint.placed_footprint(
            each, blocks, footprint.stored_bytes(ds)
        )
        warnings += experiment.data_warnings(cfg, part, graph)
        run = describe_graph_run(cfg, graph, ds, steps)
    else:
        fc = cfg.federated
        task = FEDERATED[cfg.algorithm](fc).make_task(cfg)
        task.check(n_ranks)
        make_aggregator(fc)  # (the server builds it next: a name that does not resolve stops here)
        fingerprint_data(cfg, task.fingerprint(), path)
        client = task.load_clients([0], cpu)[0]
        common = task.build_model()
        memory = footprint.worker_footprint(
            cfg, common, client, clients_held(cfg, n_ranks - 1), task.data_splits()
        )
        run = describe_server_run(cfg, n_ranks - 1, task.describe())
    shown = [w for w in warnings if w is not None]
    return Verdict(f"{run}, seed {cfg.seed}", shown, _action(cfg, n_ranks), memory, placed)


def clients_held(cfg: ExperimentConfig, workers: int) -> int:
    """How many clients' data a worker holds: every client's under dynamic or balanced
    placement with 1 < W < clients and fewer than all per round, else its home clients."""
    clients = cfg.federated.clients
    every = 1 < workers < clients and per_round(cfg) < clients
    if every and cfg.federated.placement != "static":
        return clients
    return -(-clients // max(workers, 1))


def check_creatable(path: Path, resuming: bool = False) -> None:
    """Refuse a run directory the job could not create or write into (without creating
    it): its nearest existing ancestor must be a directory this user may write into, on a
    file system mounted read-write (:func:`~fedsheaf.rundir.files.unwritable` says how to
    go on: a resumed run cannot move to another ``output.dir``)."""
    near = next(p for p in (path, *path.parents) if p.exists())
    if not near.is_dir():
        raise ConfigError(
            f"cannot create run directory {path}: {near} is a file; choose another output.dir"
        )
    if not os.access(near, os.W_OK | os.X_OK):
        raise unwritable(path, near, read_only(near), resuming)


def check_run_path(cfg: ExperimentConfig, path: Path, hold: bool) -> str | None:
    """What a job refuses of its run directory ``path`` before anything else, changing
    nothing but (with ``hold``: the job's first rank) the lock, which an existing
    directory takes first, so that nothing is read while another job writes into it;
    without ``hold`` (``fedsheaf check``) a held lock is refused as the job would.

    Returns, instead of checking, what to say when ``cfg`` resumes a run that has
    already finished (:func:`finished_note`): read under the lock, so that a run that
    finishes while a job starts is found finished, not extended to its own length.
    """
    if path.is_dir():
        # refusals that read nothing a job writes come first: they leave no lock file
        check_not_foreign(path)
        check_run_files(path)
        if hold:
            run_lock.hold(path)
        elif run_lock.probe(path):
            raise run_lock.in_use(path.resolve(), run_lock.holder(path))
    note = finished_note(cfg)
    if note is None:
        check_run_dir(cfg, path)
        check_creatable(path, resuming=cfg.checkpoint.resume)
        tensorboard.require(cfg.output.tensorboard)  # before any data are loaded
    return note


def fingerprint_data(cfg: ExperimentConfig, digest: str, path: Path) -> str:
    """``digest``, the fingerprint of the data the run trains on
    (:func:`fedsheaf.data.sources.data_digest`), which its checkpoints record; when
    resuming the run in ``path``, data that differ from those its checkpoints were
    trained on are refused."""
    if cfg.checkpoint.resume:
        check_same_data(path, digest, cfg.data.root)
    return digest


def _action(cfg: ExperimentConfig, n_ranks: int) -> str:
    """What the job would do with its run directory (after :func:`check_run_path`)."""
    path = Path(cfg.output.dir) / cfg.run_name()
    held = [n for n in (*RUN_FILES, "checkpoints") if (path / n).exists()]
    if not cfg.checkpoint.resume:
        if held and cfg.output.overwrite:
            return f"would replace the run in {path} (output.overwrite=true; it holds {held[0]})"
        return f"would write a new run in {path}"
    found = resumable(cfg, path, n_ranks)
    length, unit, _ = run_length(cfg)
    if not found:
        if not held:
            return f"would write a new run in {path} (nothing to resume there yet)"
        return f"would start {path} again from {unit} 1 (it holds no complete checkpoint)"
    chosen, problems = first_readable(found)
    if chosen is None:  # as load_latest says it
        raise checkpoint.none_readable(path, problems[0])
    if unit == "epoch" and chosen.epoch == length:  # as load_latest would
        # (the job reads the checkpoint's copy of these records)
        metrics = path / "metrics.jsonl"
        records = read_metrics(metrics) if metrics.is_file() else []
        refuse_unevaluated_end(
            path, [r for r in records if r.get("epoch", 0) <= chosen.epoch], chosen.epoch
        )
    how = "extend the finished run" if (path / "summary.json").exists() else "resume"
    skipped = (
        f" (the checkpoint after {unit} {found[0].epoch} cannot be used: {problems[0]})"
        if problems
        else ""
    )
    return f"would {how} {path} after {unit} {chosen.epoch}{skipped}"


def first_readable(
    found: list[checkpoint.Checkpoint],
) -> tuple[checkpoint.Checkpoint | None, list[str]]:
    """The newest of ``found`` whose every rank file loads (as a resumed job reads them,
    in one process: every file, as a job of any rank count reads every file of a
    decentralized run's checkpoint on some rank), and why each newer one cannot be used."""
    problems: list[str] = []
    for ckpt in found:
        try:
            if ckpt.placement is not None:  # (and holds the agents the manifest says)
                agents = [i for block in ckpt.placement for i in block]
                checkpoint.read_agents(ckpt, agents, root=True)
            else:
                for rank in range(ckpt.n_ranks):
                    checkpoint.load_rank(ckpt, rank)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        return ckpt, problems
    return None, problems
