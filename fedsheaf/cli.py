"""The ``fedsheaf`` command line: run, graph, ufm, fedrep-linear, sweep, report, bench."""

from __future__ import annotations

import argparse
import sys

from fedsheaf import __version__
from fedsheaf.errors import FedsheafError


def _run(args: argparse.Namespace) -> int:
    from fedsheaf.runtime.launch import main

    config, overrides = args.config, list(args.overrides)
    if args.resume is not None and config is not None and "=" in config:
        config, overrides = None, [config, *overrides]  # argparse took an override for CONFIG
    return main(config, overrides, args.resume)


def build_parser() -> argparse.ArgumentParser:
    from fedsheaf import graph_command
    from fedsheaf.theory import command as theory_command

    parser = argparse.ArgumentParser(
        prog="fedsheaf", description="MPI-native federated representation learning."
    )
    parser.add_argument("--version", action="version", version=f"fedsheaf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="train one experiment (launch with mpiexec -n <agents>)",
        description="Train one experiment. Launch with one rank per agent: "
        "mpiexec -n 4 fedsheaf run configs/quickstart.yaml seed=3",
    )
    run.add_argument("config", nargs="?", help="experiment YAML file (configs/*.yaml)")
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run from its newest complete checkpoint "
        "(reads RUN_DIR/config.yaml; overrides still apply)",
    )
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. train.epochs=3 sheaf.lam=0.1",
    )
    run.set_defaults(func=_run)

    graph = sub.add_parser("graph", help="build or inspect graph files")
    graph_command.configure(graph)
    graph.set_defaults(func=graph_command.run)

    from fedsheaf import report, sweep

    sweep_p = sub.add_parser("sweep", help="expand a study into runs; run or list them")
    sweep.configure(sweep_p)
    sweep_p.set_defaults(func=sweep.run)

    report_p = sub.add_parser("report", help="comparison table and figures from run directories")
    report.configure(report_p)
    report_p.set_defaults(func=report.run)

    ufm = sub.add_parser("ufm", help="unconstrained-feature-model federation (seed 002)")
    theory_command.configure(ufm)
    ufm.set_defaults(func=theory_command.run)

    lin = sub.add_parser("fedrep-linear", help="FedRep vs FedAvg on the linear model (seed 003)")
    theory_command.configure_linear(lin)
    lin.set_defaults(func=theory_command.run_linear_cli)

    from fedsheaf.bench import command as bench_command

    bench = sub.add_parser("bench", help="performance benchmarks (results/bench/)")
    bench_command.configure(bench)
    bench.set_defaults(func=bench_command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FedsheafError as exc:
        print(f"fedsheaf: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
