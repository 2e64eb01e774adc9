"""``fedsheaf sweep``: its arguments and entry point (the work is in :mod:`fedsheaf.ops.sweep`)."""

from __future__ import annotations

import argparse
import shlex

from fedsheaf.ops.processes import raise_on_sigterm
from fedsheaf.ops.study import (
    expand,
    write_manifest,
    write_presets,
)
from fedsheaf.ops.sweep import (
    DEFAULT_LAUNCHER,
    array_groups,
    check_emit_target,
    emit,
    emit_base,
    run_local,
)
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import (
    launcher_template,
)
from fedsheaf.util.units import count


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Expand a study (method × axis value × λ grid × seed) into runs. Without --local "
        "or --emit the plan is printed and nothing is written."
    )
    parser.add_argument("study", help="study file (configs/*_sweep.yaml)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="run every run here, in sequence")
    mode.add_argument(
        "--emit",
        nargs="?",
        const="",
        metavar="FILE",
        help="write one command per run (FILE, or DIR/commands.txt; default <sweep "
        "dir>/commands.txt) for slurm/sweep_array.sbatch, and print the sbatch line that "
        "submits it; runs that need other task counts (or GPUs) go to one list per group, "
        "FILE's name ending -<T>tasks[-<G>gpu]; the manifest study.json and any preset "
        "configs go to the sweep directory (the study's 'output', or --out DIR)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override for every run (repeatable)",
    )
    parser.add_argument(
        "--agents-per-rank",
        type=positive,
        metavar="K",
        help="run each decentralized method without its own 'ranks' on ceil(N/K) ranks, K "
        "of its N agents a rank (e.g. 100 agents, K=13: 8 ranks; --emit asks for that "
        "many tasks; default: one rank per agent), and each server-based one on a server "
        "and ceil(clients/K) worker ranks, K clients a worker. Hub methods (fedproto, "
        "fedmuscle) keep one rank per agent plus the server",
    )
    parser.add_argument(
        "--launcher",
        type=launcher_template,
        help="launcher prefix for --emit; {n} is the rank count (e.g. 'srun -n {n}'; "
        f"default: '{DEFAULT_LAUNCHER}')",
    )
    parser.add_argument(
        "--gpus-per-task",
        type=positive,
        metavar="N",
        help="--emit: GPUs each task of a run with train.device auto or cuda asks for "
        "(default: 1 for cuda, none for auto; none for cpu whatever this says)",
    )
    parser.add_argument(
        "--throttle",
        type=positive,
        metavar="N",
        help="--emit: run at most N array tasks of a list at once (sbatch --array=1-K%%N)",
    )
    parser.add_argument("--force", action="store_true", help="--local: rerun finished runs too")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="the sweep directory (runs, logs, study.json), instead of the study's 'output'",
    )


def positive(text: str) -> int:
    """A count of 1 or more (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, 1 or more")
    return value


def run(args: argparse.Namespace) -> int:
    if args.force and not args.local:
        raise ConfigError("option --force applies only to --local (it reruns finished runs)")
    if args.launcher is not None and args.emit is None:
        raise ConfigError(
            "option --launcher applies only to --emit (--local uses this machine's mpiexec)"
        )
    for option, value in (("--gpus-per-task", args.gpus_per_task), ("--throttle", args.throttle)):
        if value is not None and args.emit is None:
            raise ConfigError(f"option {option} applies only to --emit (the job arrays' lists)")
    dry = not args.local and args.emit is None
    study = expand(
        args.study, args.set, write=False, output=args.out, agents_per_rank=args.agents_per_rank
    )
    if dry:
        for r in study.runs:
            print(shlex.join(r.argv(["mpiexec", "-n", str(r.ranks)], ["fedsheaf"])))
        them = "it" if len(study.runs) == 1 else "them"
        print(
            f"# {count(len(study.runs), 'run')}; add --local to run {them} here or --emit to "
            f"write {them} to a command file"
        )
        return 0
    target = None
    if args.emit is not None:  # refused before anything is written
        target = emit_base(args.emit, study.output)
        for group in array_groups(study, target, args.gpus_per_task):
            check_emit_target(group.path)
    write_presets(study)
    manifest = write_manifest(study)
    if target is not None:
        groups = emit(study, target, args.launcher or DEFAULT_LAUNCHER, args.gpus_per_task)
        said = count(len(study.runs), "command")
        if len(groups) == 1:
            print(f"wrote {said} to {groups[0].path} (manifest {manifest}); submit with:")
        else:
            print(
                f"wrote {said} in {len(groups)} lists, one per task count and GPUs a task "
                f"(manifest {manifest}); submit each with its line:"
            )
        for group in groups:
            print(group.sbatch(args.throttle))
        return 0
    raise_on_sigterm()  # so that the run in progress is stopped with the sweep
    return 1 if run_local(study, force=args.force) else 0
