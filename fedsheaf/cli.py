"""The ``fedsheaf`` command line: run, graph, ufm, fedrep-linear, sweep, report."""

from __future__ import annotations

import argparse
import sys

from fedsheaf import __version__
from fedsheaf.errors import FedsheafError


def _run(args: argparse.Namespace) -> int:
    from fedsheaf.runtime.launch import main

    return main(args.config, args.overrides)


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
    run.add_argument("config", help="experiment YAML file (configs/*.yaml)")
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

    ufm = sub.add_parser("ufm", help="unconstrained-feature-model federation (seed 002)")
    theory_command.configure(ufm)
    ufm.set_defaults(func=theory_command.run)

    lin = sub.add_parser("fedrep-linear", help="FedRep vs FedAvg on the linear model (seed 003)")
    theory_command.configure_linear(lin)
    lin.set_defaults(func=theory_command.run_linear_cli)
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
