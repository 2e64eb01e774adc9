"""One job of ``fedsheaf run``, on every rank: read the config, claim the run directory,
pick devices, fetch data, then hand over to the driver of the run's family."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedsheaf.algorithms import algorithm_factory
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.launch.decentralized import run_decentralized
from fedsheaf.launch.hub import run_hub
from fedsheaf.launch.server import run_server_based
from fedsheaf.rundir import run_lock
from fedsheaf.rundir.files import read_json_object
from fedsheaf.rundir.lifecycle import (
    claim_run_dir,
)
from fedsheaf.rundir.preflight import (
    ignored_warning,
    run_config,
)
from fedsheaf.runtime import experiment, stop_request
from fedsheaf.runtime.world import (
    choose_device,
    init_world,
    leaving,
    refuse_unusable_gpus,
    watch_steps,
)
from fedsheaf.util.errors import FedsheafError
from fedsheaf.util.hostinfo import lone_task


def main(config_path: str | None, overrides: list[str], resume_dir: str | None = None) -> int:
    """Entry point of ``fedsheaf run`` on every rank (``resume_dir``: ``--resume RUN_DIR``)."""
    code, _, _ = run_job(lambda: run_config(config_path, overrides, resume_dir))
    return code


def run_job(
    read_config: Callable[[], ExperimentConfig], library: bool = False
) -> tuple[int, dict[str, Any] | None, Path]:
    """:func:`_job`; a job run from Python (``library``) then lets go of its run
    directory's lock, however it ended: the Python session goes on."""
    try:
        return _job(read_config, library)
    finally:
        if library:
            run_lock.release_all()


def _job(
    read_config: Callable[[], ExperimentConfig], library: bool
) -> tuple[int, dict[str, Any] | None, Path]:
    """One run on every rank: the exit status, the run's summary (every rank's copy of
    rank 0's; None after a stop on request, or for a finished run skipped without one)
    and its run directory.

    ``read_config`` reads the config (every rank; its user errors are said once). With
    ``library`` (:func:`fedsheaf.run`), a run skipped as finished returns the summary it
    wrote, a stop on request raises :class:`~fedsheaf.runtime.stop_request.StopRequested`,
    and a user error raised mid-run on a one-rank job raises as it is; on a job of several
    ranks it still ends the job (the others wait in a collective)."""
    world = init_world()
    world.agree(lambda: _refuse_lone_task(world.size))  # (one rank may hold every agent)
    cfg = world.agree(read_config)
    if cfg.decentralized:  # an algorithm plug-in that does not import or fit: one line, now
        world.agree(lambda: algorithm_factory(cfg))
    # again, now MPI is up
    stop_request.install(checkpoints=cfg.checkpoint.every > 0, announce=world.is_root)
    world.agree(lambda: watch_steps(cfg.train.step_timeout))  # (armed once training begins)
    warning = ignored_warning(cfg)
    if warning is not None:
        world.warn(warning)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    claim = world.agree(lambda: claim_run_dir(cfg, run_path), root_only=True)
    note = world.bcast(claim)
    if note is not None:
        world.log(note)
        leaving()
        done = world.agree(lambda: _written_summary(run_path), root_only=True) if library else None
        return 0, world.bcast(done) if library else None, run_path
    if cfg.train.device != "auto":
        world.device = world.agree(lambda: choose_device(cfg.train.device, world.local_rank))
    else:  # a collective: every rank takes part, whichever device it found
        world.agree(lambda: refuse_unusable_gpus() if world.device.type == "cpu" else None)
    if cfg.data.download:  # rank 0 first, alone; then one rank per node (node-local roots)
        world.agree(lambda: experiment.fetch_data(cfg), root_only=True)
        if world.local_size < world.size:  # several nodes
            first_on_node = world.local_rank == 0 and not world.is_root
            world.agree(lambda: experiment.fetch_data(cfg) if first_on_node else None)
    summary: dict[str, Any] | None = None
    try:
        if cfg.decentralized:
            summary = run_decentralized(cfg, world)
        elif cfg.hub_based:  # FedProto, FedMuscle: agents on a graph plus a server rank
            summary = run_hub(cfg, world)
        else:
            summary = run_server_based(cfg, world)
    except FedsheafError as exc:
        if library and world.size == 1:
            leaving()
            raise
        # Raised mid-run on some ranks (e.g. a diverged loss) while the others wait in a
        # collective: the runtime's abort hook names this rank and ends the whole job.
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except stop_request.StopRequested:  # on every rank at once, rank 0 has said so
        leaving()
        if library:
            raise
        return (
            stop_request.exit_status(),
            None,
            run_path,
        )  # (0 under a launcher: a planned stop, no crash)
    world.barrier()
    # (a hub run's summary is on the agents' rank 0, the job's rank 1)
    holders = world.comm.allgather(summary is not None)
    summary = world.comm.bcast(summary, root=holders.index(True)) if any(holders) else None
    leaving()
    return 0, summary, run_path


def _refuse_lone_task(n_ranks: int) -> None:
    """srun's tasks that MPI made jobs of one rank each would each run the whole run."""
    why = lone_task(n_ranks)
    if why is not None:
        raise FedsheafError(why)


def _written_summary(run_path: Path) -> dict[str, Any] | None:
    """The summary a finished run wrote (None if it has none)."""
    path = run_path / "summary.json"
    return read_json_object(path) if path.is_file() else None
