"""``fedsheaf sweep``: expand a study (:mod:`fedsheaf.ops.study`) into runs, then run them
locally or list them.

``--local`` runs them one after another (skipping finished ones and resuming
interrupted ones from their checkpoints), ``--emit`` writes them one per line for SLURM
job arrays (one list per task count and GPUs a task: :func:`array_groups`), and without
either the plan is printed and nothing is written. Either way ``study.json`` in the
sweep directory records every run for ``fedsheaf report``.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedsheaf.config.ranks import gpus_per_task
from fedsheaf.ops.processes import Terminated, run_job
from fedsheaf.ops.study import (
    Run,
    Study,
)
from fedsheaf.rundir.files import read_stop
from fedsheaf.util.atomic import atomic_write_json, atomic_write_text
from fedsheaf.util.errors import ConfigError, DataError, refuse_blocked_path
from fedsheaf.util.hostinfo import (
    failed_to_start,
    launcher_words,
    local_launcher,
)
from fedsheaf.util.log import get_logger
from fedsheaf.util.units import count

logger = get_logger(__name__)


def restart_overrides(run: Run, force: bool) -> list[str] | None:
    """How to (re)start ``run`` locally: None to skip it (finished), else extra overrides.

    A finished run is skipped unless ``force`` (then it starts over); an interrupted
    run continues from its newest checkpoint (from the start if it has none).
    """
    path = Path(run.dir)
    if force:
        return ["output.overwrite=true"]
    if (path / "summary.json").exists():
        return None
    if not path.exists():
        return []
    return ["checkpoint.resume=true"]


def after_interrupt(run: Run) -> str:
    """What running the sweep again does with ``run``, stopped by a signal to the sweep
    (which may come before its job wrote anything or after its summary)."""
    extra = restart_overrides(run, force=False)
    if extra is None:
        return "it had finished; run the sweep again for the runs after it"
    if not extra:
        return "it had not started; run the sweep again to start it"
    return (
        "run the sweep again to continue (this run resumes from its last checkpoint, "
        "or starts over if it wrote none)"
    )


def check_data_files(study: Study) -> None:
    """Refuse a study whose runs would each fail on data files missing here (one message,
    no run started, instead of one failed launch per run)."""
    from fedsheaf.data.sources import require_files  # torch: only for --local

    for dataset, root, split in sorted(study.data):
        try:
            require_files(dataset, root, split)
        except DataError as exc:
            raise DataError(f"study {study.name}: {exc}; no run was started") from None


def error_line(log: Path) -> str | None:
    """The first ``fedsheaf: error`` line a run's log holds (what refused or ended it)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    return next((ln.strip() for ln in text.splitlines() if "fedsheaf: error" in ln), None)


def run_local(study: Study, force: bool = False) -> int:
    """Run every unfinished run in sequence; return the number of failures (a run stopped
    on request, which exits 0, counts: it is not done).

    A run that fails has its error line printed; when two runs in a row are refused
    with the same error (exit 2: a cause common to the study, such as a missing data
    root), the sweep stops there instead of launching every run to the same end.
    """
    check_data_files(study)
    fedsheaf = [sys.executable, "-m", "fedsheaf"]
    logs = study.output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    failed, timings = [], {}
    last_refusal: str | None = None
    start_all = time.perf_counter()
    for k, run in enumerate(study.runs, 1):
        label = f"[{k}/{len(study.runs)}] {run.name}"
        extra = restart_overrides(run, force)
        if extra is None:
            logger.info(f"{label}: finished earlier, skipped")
            continue
        launcher, env = local_launcher(run.ranks)
        argv = run.argv(launcher, fedsheaf) + extra
        logger.info(f"{label}: {count(run.ranks, 'rank')} ...")
        logger.debug(f"{label}: {shlex.join(argv)}")
        start = time.perf_counter()
        try:
            code = launch_retrying(argv, env, logs, run.name, label)
        except (KeyboardInterrupt, Terminated) as exc:
            why: str | None = "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc)
            logger.warning(f"{label}: stopped by {why}, its job with it; {after_interrupt(run)}")
            raise
        seconds = time.perf_counter() - start
        timings[run.name] = round(seconds, 1)
        stopped = read_stop(Path(run.dir)) if code == 0 else None
        if stopped is not None:  # a planned stop exits 0: the run is not done
            failed.append(run.name)
            last_refusal = None
            logger.warning(f"{label}: {stopped}; run the sweep again to continue it")
            continue
        if code == 0:
            last_refusal = None
            logger.info(f"{label}: done in {seconds:.0f} s")
            continue
        failed.append(run.name)
        logger.error(f"{label}: FAILED (exit {code}); see {logs / (run.name + '.log')}")
        why = error_line(logs / f"{run.name}.log")
        if why is not None:
            logger.error(f"{label}:   {why}")
        if code == 2 and why is not None and why == last_refusal:
            logger.error(
                f"sweep {study.name}: stopped: two runs in a row were refused with the same "
                "error; fix it and run the sweep again (finished runs are skipped)"
            )
            break
        last_refusal = why if code == 2 else None
    total = time.perf_counter() - start_all
    record_timings(study.output / "timings.json", timings, total)
    print(  # the sweep's result: said whatever -q
        f"sweep {study.name}: {count(len(timings), 'run')} in {total / 60:.1f} min, "
        f"{len(failed)} failed"
    )
    return len(failed)


def launch_retrying(argv: list[str], env: dict[str, str], logs: Path, name: str, label: str) -> int:
    """Run ``argv`` logged in ``logs/NAME.log``, once more if mpiexec failed to start it
    (the failed start's log kept as ``NAME.failed-start.log``); its exit status. The log
    of an earlier invocation's launch (a run that failed, to be run again) is kept as
    ``NAME.previous.log``."""
    log, failed_log = logs / f"{name}.log", logs / f"{name}.failed-start.log"
    failed_log.unlink(missing_ok=True)  # from an earlier invocation
    if log.is_file():
        log.replace(logs / f"{name}.previous.log")
    code = launch_logged(argv, env, log)
    if code != 0 and failed_to_start(log.read_text(errors="replace"), started="fedsheaf: "):
        log.replace(failed_log)
        logger.info(
            f"{label}: mpiexec failed to start the job (exit {code}, see {failed_log}); "
            "retrying once"
        )
        code = launch_logged(argv, env, log)
    return code


def launch_logged(argv: list[str], env: dict[str, str], log: Path) -> int:
    """Run ``argv`` with its output (after the command line itself) in ``log``."""
    with open(log, "w") as out:
        out.write(shlex.join(argv) + "\n")
        out.flush()
        return run_job(argv, out, env)


def record_timings(path: Path, timings: dict[str, float], seconds: float) -> None:
    """Merge this invocation's run times (s) into ``path``; later times of a run win.

    ``--local`` skips finished runs, so a study finished in several invocations keeps
    every run's time; ``total_seconds`` is their sum, ``last_invocation_seconds`` the
    wall time of this one.
    """
    runs: dict[str, float] = {}
    if path.is_file():
        try:
            old = json.loads(path.read_text())
            runs = {str(k): float(v) for k, v in (old.get("runs") or {}).items()}
        except (ValueError, TypeError, AttributeError):
            logger.info(f"sweep: {path} is not a timings file; starting it afresh")
    runs.update(timings)
    atomic_write_json(
        path,
        {
            "total_seconds": round(sum(runs.values()), 1),
            "last_invocation_seconds": round(seconds, 1),
            "runs": runs,
        },
    )


DEFAULT_LAUNCHER = "mpiexec -n {n}"
#: The job-array script every emitted list is submitted with.
SWEEP_ARRAY = "slurm/sweep_array.sbatch"


@dataclass
class ArrayGroup:
    """The runs of a study that need the same tasks (and GPUs a task): one command list,
    submitted as one job array."""

    tasks: int
    gpus: int
    runs: list[Run]
    path: Path

    @property
    def label(self) -> str:
        """``15tasks``, ``2tasks-1gpu``: the list's file name ends so."""
        return f"{self.tasks}tasks" + (f"-{self.gpus}gpu" if self.gpus else "")

    def sbatch(self, throttle: int | None = None) -> str:
        """The ``sbatch`` line that submits this list (``throttle``: at most that many
        array tasks at once, ``%N``)."""
        array = f"--array=1-{len(self.runs)}" + (f"%{throttle}" if throttle else "")
        words = ["sbatch", array, f"--ntasks={self.tasks}"]
        if self.gpus:
            words.append(f"--gpus-per-task={self.gpus}")
        return shlex.join([*words, SWEEP_ARRAY, str(self.path)])


def emit_base(target: str | None, output: Path) -> Path:
    """The command list ``--emit [TARGET]`` names: TARGET, ``commands.txt`` inside it
    when it is a directory (existing, or written with a trailing ``/``), by default
    ``<sweep dir>/commands.txt``."""
    if not target:
        return output / "commands.txt"
    path = Path(target)
    if target.endswith(("/", os.sep)) or path.is_dir():
        return path / "commands.txt"
    return path


def array_groups(study: Study, base: Path, gpus: int | None = None) -> list[ArrayGroup]:
    """``study``'s runs grouped by the tasks and GPUs a task they need, fewest first,
    each with its list's path: ``base`` itself when there is one group, else ``base``'s
    name with the group's label (``commands-2tasks.txt``, ``commands-15tasks-1gpu.txt``).
    ``gpus`` (``--gpus-per-task``) goes to every run that may train on a GPU
    (:func:`fedsheaf.config.ranks.gpus_per_task`)."""
    grouped: dict[tuple[int, int], list[Run]] = {}
    for run in study.runs:
        key = (run.ranks, gpus_per_task(run.extra.get("device", "auto"), gpus))
        grouped.setdefault(key, []).append(run)
    groups = [ArrayGroup(t, g, runs, base) for (t, g), runs in sorted(grouped.items())]
    if len(groups) > 1:
        for group in groups:
            group.path = base.with_name(f"{base.stem}-{group.label}{base.suffix}")
    return groups


def emit(
    study: Study,
    path: Path,
    launcher: str = DEFAULT_LAUNCHER,
    gpus: int | None = None,
) -> list[ArrayGroup]:
    """Write one command line per run (line k = SLURM array task k), one list per group
    of runs that need the same tasks and GPUs (:func:`array_groups`; ``path`` itself when
    every run needs the same).

    Every line resumes its run (``checkpoint.resume=true``): run again (a requeued or
    resubmitted task) it continues an interrupted run, leaves a finished one alone
    (exit 0), and starts a run that has no checkpoint yet.
    """
    try:
        prefix = launcher_words(launcher)
    except ValueError as exc:
        raise ConfigError(f"--launcher: {exc}") from None
    groups = array_groups(study, path, gpus)
    for group in groups:
        check_emit_target(group.path)
    for group in groups:
        lines = [
            shlex.join([*r.argv(prefix, ["fedsheaf"]), "checkpoint.resume=true"])
            for r in group.runs
        ]
        atomic_write_text(group.path, "\n".join(lines) + "\n")
    warn_stale_lists(path, [g.path for g in groups])
    return groups


def warn_stale_lists(base: Path, written: list[Path]) -> None:
    """Name the command lists beside ``base`` that an earlier ``--emit`` wrote and this
    one did not (another grouping: a list of runs no longer in the study's groups)."""
    near = [base, *base.parent.glob(f"{glob.escape(base.stem)}-*tasks*{glob.escape(base.suffix)}")]
    for old in sorted(set(near) - set(written)):
        if old.is_file() and is_command_list(old):
            logger.warning(
                f"sweep: {old} is from an earlier --emit and is not one of this sweep's "
                "lists; remove it (do not submit it)"
            )


def is_command_list(path: Path) -> bool:
    """Whether ``path`` holds a command list written by ``--emit`` (and nothing else)."""
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError):
        return False
    return all(" fedsheaf run " in ln and ln.endswith(" checkpoint.resume=true") for ln in lines)


def check_emit_target(path: Path) -> None:
    """Refuse to write the command list over a file that is not one (a config, the study
    file, notes): only an earlier ``--emit`` output is replaced."""
    refuse_blocked_path(path, "--emit")
    if not path.exists():
        return
    if path.is_dir():
        raise ConfigError(f"--emit {path}: it is a directory; name a file")
    if is_command_list(path):
        return
    raise ConfigError(
        f"--emit {path}: the file exists and is not a command list written by --emit; "
        "choose another file (or remove it first)"
    )


