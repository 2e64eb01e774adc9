"""``fedsheaf sweep``: its arguments and entry point (the work is in :mod:`fedsheaf.ops.sweep`)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from fedsheaf.ops.processes import raise_on_sigterm
from fedsheaf.ops.study import (
    expand,
    write_manifest,
    write_presets,
)
from fedsheaf.ops.sweep import DEFAULT_LAUNCHER, check_emit_target, emit, run_local
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
        help="write one command per run (default <sweep dir>/commands.txt), e.g. for "
        "slurm/sweep_array.sbatch; the manifest study.json and any preset configs go to the "
        "sweep directory (the study's 'output', or --out DIR)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override for every run (repeatable)",
    )
    parser.add_argument(
        "--launcher",
        type=launcher_template,
        help="launcher prefix for --emit; {n} is the rank count (e.g. 'srun -n {n}'; "
        f"default: '{DEFAULT_LAUNCHER}')",
    )
    parser.add_argument("--force", action="store_true", help="--local: rerun finished runs too")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="the sweep directory (runs, logs, study.json), instead of the study's 'output'",
    )


def run(args: argparse.Namespace) -> int:
    if args.force and not args.local:
        raise ConfigError("option --force applies only to --local (it reruns finished runs)")
    if args.launcher is not None and args.emit is None:
        raise ConfigError(
            "option --launcher applies only to --emit (--local uses this machine's mpiexec)"
        )
    dry = not args.local and args.emit is None
    study = expand(args.study, args.set, write=False, output=args.out)
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
        target = Path(args.emit) if args.emit else study.output / "commands.txt"
        check_emit_target(target)
    write_presets(study)
    manifest = write_manifest(study)
    if target is not None:
        path = emit(study, target, args.launcher or DEFAULT_LAUNCHER)
        print(f"wrote {count(len(study.runs), 'command')} to {path} (manifest {manifest})")
        return 0
    raise_on_sigterm()  # so that the run in progress is stopped with the sweep
    return 1 if run_local(study, force=args.force) else 0
