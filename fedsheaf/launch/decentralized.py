"""Launch one rank of a run: validate collectively, build the agent, train, summarise."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from fedsheaf.algorithms import DECENTRALIZED
from fedsheaf.algorithms.base import Agent, DecentralizedAlgorithm
from fedsheaf.config.sections import ExperimentConfig, dump_config
from fedsheaf.data.partition import Partition
from fedsheaf.data.sources import Dataset, data_digest
from fedsheaf.rundir import checkpoint, run_lock
from fedsheaf.rundir.files import (
    FAILURE_FILE,
    PREVIOUS_SUMMARY,
    STOP_FILE,
    RunDir,
    atomic_write_text,
)
from fedsheaf.rundir.preflight import (
    check_run_path,
    describe_graph_run,
    fingerprint_data,
    ignored_warning,
    refuse_unevaluated_end,
    resumable,
    run_config,
    run_length,
)
from fedsheaf.rundir.progress import Recorder, accuracies, agent_table
from fedsheaf.rundir.resume import GRAPH_COPY, experiment_keys, load_run_config
from fedsheaf.runtime import experiment, stop_request
from fedsheaf.runtime.topology import Neighbourhood
from fedsheaf.runtime.world import (
    World,
    choose_device,
    init_world,
    leaving,
    note_run_dir,
    refuse_unusable_gpus,
)
from fedsheaf.util import memory
from fedsheaf.util.errors import ConfigError, FedsheafError
from fedsheaf.util.units import count


def run_decentralized(
    cfg: ExperimentConfig,
    world: World,
    make: Callable[..., DecentralizedAlgorithm] | None = None,
    job: World | None = None,
    loaded: Loaded | None = None,
    dataset: tuple[Dataset, Partition] | None = None,
) -> dict[str, Any] | None:
    """Run a graph-coupled algorithm with one agent per rank; rank 0 returns the summary.

    ``make(agent, nbr, reporter)`` builds the algorithm (default: the registry's entry
    for ``cfg.algorithm``; fedsheaf.launch.hub passes one that also holds the server).
    ``job`` is the set of ranks that write checkpoints (default ``world``; a hub run's
    whole job, server included) and ``loaded`` what :func:`load_latest` already read
    on it when resuming; ``dataset`` the data set and partition the job already loaded
    (every rank gives one, or none does).
    """
    job = job or world
    graph = world.agree(lambda: experiment.build_graph(cfg, world.size))
    ds, part = dataset or world.agree(lambda: experiment.load_and_partition(cfg))
    data = world.agree(lambda: experiment.agent_data(ds, part, world.rank, world.device))
    steps = experiment.steps_per_epoch(cfg, part)
    for warning in experiment.data_warnings(cfg, part, graph):
        world.log(warning)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    # (a hub run's server checks it, and records it: it commits the checkpoints)
    digest = check_data(world, cfg, ds, run_path) if job is world else None
    model = experiment.agent_model(cfg, ds, world.rank, world.device)
    agent = Agent(world.rank, cfg, graph, data, model, world.device, steps)
    nbr = Neighbourhood(world.comm, graph.neighbours(world.rank))
    recorder = Recorder(world, None, cfg.train.epochs)
    # built before the run directory is touched: what fails here (an empty pilot set)
    # leaves a run that output.overwrite=true would replace as it was
    algo = world.agree(lambda: (make or DECENTRALIZED[cfg.algorithm])(agent, nbr, recorder))
    if job is world:
        run_dir = world.agree(lambda: open_run_dir(cfg, run_path), root_only=True)
    else:  # the job checked it (and may have written its server's checkpoints since)
        run_dir = RunDir(run_path, extend=cfg.checkpoint.resume) if world.is_root else None
    recorder.run_dir = run_dir
    first_epoch, resumed_state = 0, None
    if cfg.checkpoint.resume:
        loaded = loaded or load_latest(job, cfg, run_path)
        first_epoch = restore(world, run_path, algo, nbr, recorder, loaded)
        resumed_state = loaded[1]
    if run_dir is not None:
        settle_config(run_dir, cfg)
    world.barrier()  # an earlier launch's failed.json is gone before any rank may write one
    note_run_dir(run_path)
    world.log(
        f"fedsheaf: {describe_graph_run(cfg, graph, ds, steps)}, device {world.device}, "
        f"{count(world.threads, 'thread')} per rank, seed {cfg.seed}"
    )
    if run_dir is not None:
        world.log(f"fedsheaf: writing {run_dir.path}")
    clock = checkpoint.WallClock()
    clock.resumed(resumed_state)

    def state() -> dict[str, Any]:
        out = {"algorithm": algo.state_dict(), "bytes_total": dict(nbr.bytes_total)}
        if world.is_root:
            out["history"] = recorder.history
            out[clock.KEY] = clock.total()
        return out

    algo.run(first_epoch, checkpointer(cfg, job, run_path, state, digest))
    elapsed = clock.stop()
    nbr.free()
    peaks = world.peak_memory()  # (a hub's agents: not its server)
    if not world.is_root or recorder.last is None or peaks is None:
        return None
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
    )
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


def claim_run_dir(cfg: ExperimentConfig, path: Path) -> str | None:
    """Rank 0: :func:`~fedsheaf.rundir.preflight.check_run_path`, holding the lock until this
    process ends. ``main`` calls it before the data are loaded (minutes, for a large data
    set), so that a run directory in use, unfinished or not writable is refused at once."""
    return check_run_path(cfg, path, hold=True)


def check_data(world: World, cfg: ExperimentConfig, ds: Dataset, run_path: Path) -> str | None:
    """Collectively: :func:`~fedsheaf.rundir.preflight.fingerprint_data` on rank 0 (None
    elsewhere), which commits the checkpoints."""
    return world.agree(lambda: fingerprint_data(cfg, data_digest(ds), run_path), root_only=True)


def open_run_dir(cfg: ExperimentConfig, path: Path) -> RunDir:
    """Rank 0: the run directory, once :func:`claim_run_dir` has found nothing against
    it (with ``output.overwrite``, an earlier run's checkpoints go)."""
    if not run_lock.held(path):  # it did not exist at the first look: it may now
        note = claim_run_dir(cfg, path)
        if note is not None:  # finished by another job since the first look
            raise ConfigError(note.removeprefix("fedsheaf: "))
    if not cfg.checkpoint.resume and cfg.output.overwrite:
        checkpoint.delete_checkpoints(path)
    return RunDir(path, cfg.output.overwrite, extend=cfg.checkpoint.resume, lock=True)


def settle_config(run_dir: RunDir, cfg: ExperimentConfig) -> None:
    """Rank 0, before the first epoch (round): write ``cfg`` as the run's config.yaml.

    When resuming, this runs only once the checkpoint has been read on every rank, so a
    refused or failed resume leaves the directory as it was. A finished run being
    extended then sets its summary aside as ``summary.prev.json`` until the new end; if
    the extension fails later, the run is an interrupted one of the greater length.
    """
    path = run_dir.path
    if cfg.checkpoint.resume and (path / "summary.json").exists():
        done, unit, _ = run_length(load_run_config(path / "config.yaml"))
        (path / "summary.json").replace(path / PREVIOUS_SUMMARY)
        print(
            f"fedsheaf: extending the finished run {path} from {done} to "
            f"{count(run_length(cfg)[0], unit)} (its summary kept as {PREVIOUS_SUMMARY} "
            "until the new end)",
            flush=True,
        )
    run_dir.write_config(dump_config(cfg))
    for end in (FAILURE_FILE, STOP_FILE):  # how an earlier launch ended, resumed from
        (path / end).unlink(missing_ok=True)
    if cfg.graph is not None and (cfg.decentralized or cfg.hub_based):
        atomic_write_text(path / GRAPH_COPY, Path(cfg.graph).read_text(encoding="utf-8"))


#: What resuming reads: the newest complete checkpoint and this rank's state in it.
Loaded = tuple[checkpoint.Checkpoint | None, dict[str, Any] | None]


def load_latest(job: World, cfg: ExperimentConfig, run_path: Path) -> Loaded:
    """Collectively on ``job``: the newest complete checkpoint that every rank can read,
    and this rank's state in it.

    A checkpoint with a damaged file (a disk that filled up, a copy cut short) is
    skipped for the one before it, with a note. A checkpoint past the run's length (the
    config's epochs or rounds) is an error: the run would end before it started; so is,
    for epochs, one at that length that was not evaluated
    (:func:`~fedsheaf.rundir.preflight.refuse_unevaluated_end`; rounds: ``Rounds`` checks its
    score window).
    """
    length, unit, _ = run_length(cfg)
    candidates = job.bcast(job.agree(lambda: resumable(cfg, run_path, job.size), root_only=True))
    problems = []
    for ckpt in candidates:
        try:
            state, problem = checkpoint.load_rank(ckpt, job.rank), None
        except checkpoint.CheckpointError as exc:
            state, problem = None, str(exc)
        gathered = job.gather(problem)
        problems = job.bcast([p for p in gathered if p] if gathered is not None else None)
        if not problems:
            if unit == "epoch":  # the rank holding the history checks it
                history = (state or {}).get("history") or []
                job.agree(partial(refuse_unevaluated_end, run_path, history, length))
            return ckpt, state
        job.log(
            f"fedsheaf: the checkpoint after {unit} {ckpt.epoch} cannot be used "
            f"({problems[0]}); trying the one before"
        )
    if problems:

        def unreadable() -> None:
            raise checkpoint.none_readable(run_path, problems[0])

        job.agree(unreadable, root_only=True)
    return None, None


def restore(
    world: World,
    run_path: Path,
    algo: DecentralizedAlgorithm,
    nbr: Neighbourhood,
    recorder: Recorder,
    loaded: Loaded,
) -> int:
    """Install the loaded checkpoint on every agent; returns the epochs already done."""
    ckpt, state = loaded
    history: list[dict[str, Any]] = []
    if ckpt is None or state is None:
        world.log(f"fedsheaf: no complete checkpoint in {run_path}; starting from epoch 1")
    else:
        world.agree(lambda: algo.load_state_dict(state["algorithm"]))
        nbr.bytes_total = dict(state["bytes_total"])
        history = state.get("history", [])
        world.log(f"fedsheaf: resuming {run_path} after epoch {ckpt.epoch}")
    if world.is_root:  # metrics of epochs after the checkpoint are written again
        recorder.restore(history)
        checkpoint.cut_back(run_path, None if ckpt is None else ckpt.epoch, history)
    return 0 if ckpt is None else ckpt.epoch


def checkpointer(
    cfg: ExperimentConfig,
    job: World,
    run_path: Path,
    state: Callable[[], dict[str, Any]],
    data: str | None = None,
) -> Callable[[int], None] | None:
    """The after-epoch (after-round) hook: every rank of ``job`` saves ``state()``, then
    ``job``'s root commits the manifest once all files are on disk (with ``data``, the
    data set's fingerprint on that root: :func:`check_data`).

    A stop requested on any rank (:mod:`fedsheaf.runtime.stop_request`) writes the
    checkpoint now and raises :class:`~fedsheaf.runtime.stop_request.StopRequested` on
    every rank, unless this was the last epoch (round) anyway.
    """
    every, keep = cfg.checkpoint.every, cfg.checkpoint.keep
    last, unit, _ = run_length(cfg)
    experiment = experiment_keys(cfg)

    def save(done: int) -> None:
        requested = job.any(stop_request.requested())
        stop = requested and done < last
        if requested and not stop and job.is_root:
            print(
                f"fedsheaf: {stop_request.SIGNAL.name} in the last {unit}: the run finishes "
                "instead of stopping",
                flush=True,
            )
        if not (stop or checkpoint.due(done, every, last)):
            return
        checkpoint.save_rank(run_path, done, job.rank, state())
        job.barrier()  # every rank's file is on disk before the manifest names it
        if job.is_root:
            checkpoint.commit(run_path, done, job.size, keep, experiment, data)
        if stop:
            if job.is_root:
                stop_request.leave_note(run_path, unit, done)
                # said before any rank leaves: a launcher may end the job as the first exits
                print(
                    f"fedsheaf: stopped on {stop_request.SIGNAL.name} after {unit} {done} of "
                    f"{last}, its checkpoint written; continue with: fedsheaf run --resume "
                    f"{run_path}",
                    flush=True,
                )
            job.barrier()  # the checkpoint and the note are on disk before any rank leaves
            raise stop_request.StopRequested(run_path, done)

    return save if every > 0 else None


def main(config_path: str | None, overrides: list[str], resume_dir: str | None = None) -> int:
    """Entry point of ``fedsheaf run`` on every rank (``resume_dir``: ``--resume RUN_DIR``)."""
    world = init_world()
    cfg = world.agree(lambda: run_config(config_path, overrides, resume_dir))
    # again, now MPI is up
    stop_request.install(checkpoints=cfg.checkpoint.every > 0, announce=world.is_root)
    warning = ignored_warning(cfg)
    if warning is not None:
        world.log(warning)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    claim = world.agree(lambda: claim_run_dir(cfg, run_path), root_only=True)
    note = world.bcast(claim)
    if note is not None:
        world.log(note)
        leaving()
        return 0
    if cfg.train.device != "auto":
        world.device = world.agree(lambda: choose_device(cfg.train.device, world.local_rank))
    else:  # a collective: every rank takes part, whichever device it found
        world.agree(lambda: refuse_unusable_gpus() if world.device.type == "cpu" else None)
    if cfg.data.download:  # rank 0 first, alone; then one rank per node (node-local roots)
        world.agree(lambda: experiment.fetch_data(cfg), root_only=True)
        if world.local_size < world.size:  # several nodes
            first_on_node = world.local_rank == 0 and not world.is_root
            world.agree(lambda: experiment.fetch_data(cfg) if first_on_node else None)
    try:
        if cfg.decentralized:
            run_decentralized(cfg, world)
        elif cfg.hub_based:  # FedProto, FedMuscle: agents on a graph plus a server rank
            from fedsheaf.launch.hub import run_hub

            run_hub(cfg, world)
        else:
            from fedsheaf.launch.server import run_server_based

            run_server_based(cfg, world)
    except FedsheafError as exc:
        # Raised mid-run on some ranks (e.g. a diverged loss) while the others wait in a
        # collective: the runtime's abort hook names this rank and ends the whole job.
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except stop_request.StopRequested:  # on every rank at once, rank 0 has said so
        leaving()
        return stop_request.STOPPED_EXIT
    world.barrier()
    leaving()
    return 0
