"""``fedsheaf watch``: its arguments and entry point (the work is in :mod:`fedsheaf.ops.watch`)."""

from __future__ import annotations

import argparse

from fedsheaf.ops.watch import watch


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Follow a running job: a header from RUN_DIR/config.yaml, then each epoch/round "
        "line of RUN_DIR/metrics.jsonl as it appears; stops when summary.json appears "
        "(exit 0), when failed.json says the job ended on an error (exit 1), or when "
        "stopped.json says the run stopped on request (SIGUSR1) with a checkpoint, to be "
        "resumed (exit 3; with --until-finished it waits for the resume)."
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's output directory")
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between polls, at most a day (default: %(default)s)",
    )
    parser.add_argument("--once", action="store_true", help="print the current state and exit")
    parser.add_argument(
        "--stall",
        type=float,
        default=30.0,
        metavar="MIN",
        help="say so when no record has come for MIN minutes, or no run has started "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--until-finished",
        action="store_true",
        help="follow a run stopped with its checkpoint (SIGUSR1, a job requeued at its time "
        "limit) on through its resume, until it finishes or fails",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return watch(
            args.run_dir,
            args.interval,
            args.once,
            stall=args.stall,
            until_finished=args.until_finished,
        )
    except KeyboardInterrupt:
        return 130
