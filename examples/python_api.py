"""A small study from Python: Sheaf-FRL's penalty weight λ against no cooperation (λ = 0),
over a few seeds, with fedsheaf's Python API (docs/extending.md#the-python-api).

Launch it as ``fedsheaf run`` is launched, one process per rank; every rank runs the same
script and gets the same summaries, and rank 0 prints the tables. From the repository
root (the quickstart: 4 agents on scikit-learn's digits, no data files):

    mpiexec -n 4 python examples/python_api.py --out runs/api_study
    mpiexec -n 4 python examples/python_api.py --out runs/api_study --lams 0 0.1 0.3 --seeds 0 1 2
    mpiexec -n 3 python examples/python_api.py --out runs/api_plugin \\
        --config examples/plugin/configs/decentralized.yaml   # (pip install ./examples/plugin)

A run already finished in ``--out`` is not trained again (its summary is read back), so
the script may be run again with more seeds. The tables use pandas where it is installed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import yaml
from mpi4py import MPI

import fedsheaf


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output.dir: where the runs go")
    parser.add_argument(
        "--config", default="quickstart", help="a config file or preset (default: quickstart)"
    )
    parser.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.3], help="sheaf.lam")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="run seeds")
    parser.add_argument("--epochs", type=int, default=3, help="train.epochs (default: 3)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other config override, as fedsheaf run takes it (data.limit=600)",
    )
    return parser.parse_args()


def overrides(texts: list[str]) -> dict[str, Any]:
    """``key=value`` texts as keyword arguments of fedsheaf.run (values read as YAML)."""
    out = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep:
            raise fedsheaf.ConfigError(f"--set {text!r}: give it as KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value)
    return out


def study(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One run per (λ, seed); one row each, with numbers from the summary and the records."""
    rows = []
    for lam in args.lams:
        for seed in args.seeds:
            keys = overrides(args.set) | {
                "seed": seed,
                "sheaf.lam": lam,
                "train.epochs": args.epochs,
                "output.dir": args.out,
                "output.name": f"lam{lam:g}-seed{seed}",  # (the default name has no λ)
            }
            summary = fedsheaf.run(args.config, **keys)
            run = fedsheaf.load_run(summary.run_dir)  # config, per-epoch and per-agent records
            comm = [r["comm_acc"] for r in run.epochs if r.get("comm_acc") is not None]
            last = run.epochs[-1]["epoch"]
            worst = min(
                (a["private_acc"] for a in run.agents if a["epoch"] == last),
                default=float("nan"),
            )
            rows.append(
                {
                    "lam": f"{lam:g}",
                    "seed": seed,
                    "private": summary.private,
                    "comm": summary.comm,
                    "best_comm": max(comm, default=float("nan")),
                    "worst_agent": worst,
                    "MB_sent": (summary.bytes_total or 0) / 1e6,
                    "seconds": summary.wall_seconds,
                }
            )
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    """The runs, then the mean over seeds at each λ."""
    columns = ("private", "comm", "best_comm", "worst_agent")
    means = [
        {"lam": lam, "runs": len(group)}
        | {c: statistics.fmean(r[c] for r in group) for c in columns}
        for lam in dict.fromkeys(r["lam"] for r in rows)
        for group in [[r for r in rows if r["lam"] == lam]]
    ]
    try:
        import pandas as pd
    except ImportError:
        pd = None
    for title, table in (("runs", rows), ("mean over seeds", means)):
        print(f"\n== {title}")
        if pd is not None:
            print(pd.DataFrame(table).to_string(index=False, float_format="{:.3f}".format))
            continue
        names = list(table[0])
        cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()]
                 for r in table]
        widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
        print("  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True)))
        for c in cells:
            print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def main() -> int:
    args = arguments()
    rank = MPI.COMM_WORLD.Get_rank()
    try:
        rows = study(args)
    except fedsheaf.ConfigError as exc:  # the same words on every rank: say it once
        if rank == 0:
            print(f"python_api.py: error: {exc}", file=sys.stderr)
        return 2
    if rank == 0:
        show(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
