"""A run directory's life around the training loop: claim it, check its data, restore from
its newest checkpoint, and save checkpoints as the run goes (every job driver uses these)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from fedsheaf.config.sections import ExperimentConfig, dump_config
from fedsheaf.data.sources import Dataset, data_digest
from fedsheaf.rundir import checkpoint, run_lock
from fedsheaf.rundir.files import (
    FAILURE_FILE,
    PREVIOUS_SUMMARY,
    STOP_FILE,
    RunDir,
    write_failure,
    write_stop,
)
from fedsheaf.rundir.preflight import (
    check_run_path,
    fingerprint_data,
    refuse_unevaluated_end,
    resumable,
    run_length,
)
from fedsheaf.rundir.progress import Recorder
from fedsheaf.rundir.resume import GRAPH_COPY, experiment_keys, load_run_config
from fedsheaf.runtime import stop_request
from fedsheaf.runtime.stop_request import NOTE_ENV, SIGNAL
from fedsheaf.runtime.world import (
    World,
    note_run_dir,
)
from fedsheaf.util.atomic import atomic_write_json, atomic_write_text
from fedsheaf.util.errors import CheckpointError, ConfigError
from fedsheaf.util.log import CHOSEN, get_logger
from fedsheaf.util.units import count

logger = get_logger(__name__)


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
        logger.info(  # (the run directory's rank: a hub run's agents' rank 0, the job's 1)
            f"fedsheaf: extending the finished run {path} from {done} to "
            f"{count(run_length(cfg)[0], unit)} (its summary kept as {PREVIOUS_SUMMARY} "
            "until the new end)",
            extra=CHOSEN,
        )
    run_dir.write_config(dump_config(cfg))
    for end in (FAILURE_FILE, STOP_FILE):  # how an earlier launch ended, resumed from
        (path / end).unlink(missing_ok=True)
    if cfg.graph is not None and (cfg.decentralized or cfg.hub_based):
        atomic_write_text(path / GRAPH_COPY, Path(cfg.graph).read_text(encoding="utf-8"))


#: What resuming reads: the newest complete checkpoint and this rank's state in it.
Loaded = tuple[checkpoint.Checkpoint | None, dict[str, Any] | None]


def load_latest(
    job: World,
    cfg: ExperimentConfig,
    run_path: Path,
    placement: Sequence[Sequence[int]] | None = None,
) -> Loaded:
    """Collectively on ``job``: the newest complete checkpoint that every rank can read,
    and this rank's state in it.

    ``placement``: a decentralized run's agents on ``job``'s ranks
    (:func:`fedsheaf.graphs.place_agents`): its checkpoints may have been written on
    another rank count, and each rank reads the files that hold its agents, rank 0 also
    rank 0's for the run's history and clock
    (:func:`~fedsheaf.rundir.checkpoint.read_agents`). Otherwise each rank reads its own
    file, written by the same rank count.

    Each rank checks a file before reading it (present, and of the size and SHA-256
    the manifest recorded: :func:`~fedsheaf.rundir.checkpoint.check_rank_file`). A
    checkpoint with a file missing, damaged or unreadable on any rank (a disk that filled
    up, a copy cut short, bytes garbled on disk) is skipped on every rank for the one
    before it, with a line saying why; none left is a refusal. A checkpoint past the
    run's length (the config's epochs or rounds) is an error: the run would end before it
    started; so is, for epochs, one at that length that was not evaluated
    (:func:`~fedsheaf.rundir.preflight.refuse_unevaluated_end`; rounds: ``Rounds`` checks its
    score window).
    """
    length, unit, _ = run_length(cfg)
    candidates = job.bcast(job.agree(lambda: resumable(cfg, run_path, job.size), root_only=True))
    newest: str | None = None  # why the newest cannot be used (as ``fedsheaf check`` says)
    for ckpt in candidates:
        try:
            if placement is not None and ckpt.placement is not None:
                mine = placement[job.rank]
                state, problem = checkpoint.read_agents(ckpt, mine, job.is_root), None
            else:
                state, problem = checkpoint.load_rank(ckpt, job.rank), None
        except CheckpointError as exc:
            state, problem = None, str(exc)
        gathered = job.gather(problem)
        problems = job.bcast([p for p in gathered if p] if gathered is not None else None)
        if not problems:
            if unit == "epoch":  # the rank holding the history checks it
                history = (state or {}).get("history") or []
                job.agree(partial(refuse_unevaluated_end, run_path, history, length))
            return ckpt, state
        newest = newest or problems[0]
        job.log(
            f"fedsheaf: the checkpoint after {unit} {ckpt.epoch} cannot be used "
            f"({problems[0]}); trying the one before"
        )
    if newest is not None:
        reason = newest

        def unreadable() -> None:
            raise checkpoint.none_readable(run_path, reason)

        job.agree(unreadable, root_only=True)
    return None, None


def restore(
    world: World,
    run_path: Path,
    install: Callable[[dict[str, Any]], None],
    recorder: Recorder,
    loaded: Loaded,
) -> int:
    """Install the loaded checkpoint on this rank's agents (``install(state)``: this
    rank's state in it); returns the epochs already done."""
    ckpt, state = loaded
    history: list[dict[str, Any]] = []
    if ckpt is None or state is None:
        world.log(f"fedsheaf: no complete checkpoint in {run_path}; starting from epoch 1")
    else:
        world.agree(lambda: install(state))
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
    placement: Sequence[Sequence[int]] | None = None,
) -> Callable[[int], None] | None:
    """The after-epoch (after-round) hook: every rank of ``job`` saves ``state()``, then
    ``job``'s root commits the manifest once all files are on disk, with every file's
    digest (with ``data``, the data set's fingerprint on that root: :func:`check_data`;
    with ``placement``, a decentralized run's agents on the ranks, so that another rank
    count can resume).

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
            logger.info(
                f"fedsheaf: {stop_request.SIGNAL.name} in the last {unit}: the run finishes "
                "instead of stopping",
                extra=CHOSEN,
            )
        if not (stop or checkpoint.due(done, every, last)):
            return
        written = checkpoint.save_rank(run_path, done, job.rank, state())
        # every rank's file is on disk, and its digest here, before the manifest names it
        digests = job.gather(written)
        if job.is_root:
            checkpoint.commit(run_path, done, job.size, keep, experiment, data, digests, placement)
        if stop:
            if job.is_root:
                leave_note(run_path, unit, done)
                # said before any rank leaves: a launcher may end the job as the first exits
                logger.info(
                    f"fedsheaf: stopped on {stop_request.SIGNAL.name} after {unit} {done} of "
                    f"{last}, its checkpoint written; continue with: fedsheaf run --resume "
                    f"{run_path}",
                    extra=CHOSEN,
                )
            job.barrier()  # the checkpoint and the note are on disk before any rank leaves
            raise stop_request.StopRequested(run_path, done)

    return save if every > 0 else None


def leave_note(run_dir: Path, unit: str, done: int) -> Path | None:
    """Rank 0, once the checkpoint after ``done`` is committed: mark the run directory as
    stopped (for ``fedsheaf watch`` and ``report``), and write the file that
    :data:`NOTE_ENV` names, if any (atomically, so a reader never sees half of it)."""
    try:
        write_stop(run_dir, SIGNAL.name, unit, done)
    except OSError as exc:  # the checkpoint is written: stop all the same, and say so
        logger.warning(f"fedsheaf: warning: cannot mark {run_dir} as stopped: {exc}")
    name = os.environ.get(NOTE_ENV, "").strip()
    if not name:
        return None
    path = Path(name)
    try:
        atomic_write_json(path, {"run_dir": str(run_dir), unit: done})
    except OSError as exc:  # the checkpoint is written: stop all the same, and say so
        logger.warning(f"fedsheaf: warning: cannot write {NOTE_ENV}={path}: {exc}")
        return None
    return path


def follow_run_dir(path: Path) -> None:
    """From now on an error or signal that ends this rank's job is written into run
    directory ``path`` (``failed.json``), and a ``stopped.json`` or ``summary.json``
    written since the rank started says the job ended already
    (:func:`fedsheaf.runtime.world.note_run_dir`)."""
    note_run_dir(path, write_failure, (STOP_FILE, "summary.json"))
