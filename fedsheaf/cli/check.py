"""``fedsheaf check``: a run's pre-flight checks for a given rank count, in one process.

A batch job that would stop on its config (a graph of the wrong size, a missing data
file, a run directory that holds an unfinished run) should not wait in a queue first.
``fedsheaf check -n 16 CONFIG [key=value ...]`` runs what the job's ranks would check
before their first step, without MPI, and says what the job would do.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fedsheaf.config.ranks import rank_range, ranks_needed
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.rundir.checkpoint import manifest_ranks
from fedsheaf.rundir.preflight import check_job, finished_note, run_config
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import get_logger
from fedsheaf.util.units import count

logger = get_logger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check a run before launching it: the config, the rank count, the graph, the data "
        "files, partition and shards, the algorithm's set-up, every model, and the run "
        "directory (read only). Runs in one process, without MPI, e.g. on a login node "
        "before sbatch; with data.download=true it fetches missing data files as the job "
        "would. Exit status 0 if the job would start, 2 (with the job's error) if not."
    )
    parser.add_argument("config", nargs="?", help="experiment YAML file (configs/*.yaml)")
    parser.add_argument(
        "-n",
        "--ranks",
        type=int,
        metavar="N",
        help="the job's rank count (mpiexec -n N); default: SLURM_NTASKS inside an "
        "allocation, else that of the job that checkpointed the run being resumed, else "
        "the count the config needs (server-based algorithms: required)",
    )
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="check resuming RUN_DIR (fedsheaf run --resume)"
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def job_ranks(given: int | None, cfg: ExperimentConfig) -> tuple[int, str]:
    """The rank count to check and where it came from: ``-n``, else the allocation's,
    else that of the job that checkpointed the run being resumed, else the one the
    config needs."""
    if given is not None:
        if given < 1:
            raise ConfigError(f"-n must be a positive rank count, got {given}")
        return given, ""
    ntasks = os.environ.get("SLURM_NTASKS", "").strip()
    if ntasks:
        if not (ntasks.isdigit() and int(ntasks) >= 1):
            raise ConfigError(f"SLURM_NTASKS={ntasks!r} is not a rank count; give it with -n N")
        return int(ntasks), " (SLURM_NTASKS; -n to check another count)"
    if cfg.checkpoint.resume:
        wrote = manifest_ranks(Path(cfg.output.dir) / cfg.run_name())
        if wrote is not None:
            return wrote, " (as the job that wrote its checkpoints; -n to check another count)"
    lo, hi = ranks_needed(cfg)
    if lo == hi:
        return lo, ""
    raise ConfigError(
        f"give the job's rank count with -n N (this config takes {rank_range((lo, hi))} ranks)"
    )


def run(args: argparse.Namespace) -> int:
    cfg = run_config(args.config, list(args.overrides), args.resume, "fedsheaf check")
    note = finished_note(cfg)  # the job says this before anything else, whatever its size
    if note is not None:  # (the check's result: printed whatever -q, as the verdict below)
        print(f"fedsheaf check: {note.removeprefix('fedsheaf: ')}")
        return 0
    n, source = job_ranks(args.ranks, cfg)
    verdict = check_job(cfg, n)
    for warning in verdict.warnings:
        logger.warning(warning)
    print(f"fedsheaf check: ok for {count(n, 'rank')}{source}: {verdict.run}")
    print(f"fedsheaf check: {verdict.action}")
    return 0
