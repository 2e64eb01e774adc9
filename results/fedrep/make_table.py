"""Table (Markdown + CSV) and accuracy-vs-round PNG from server-based run directories.

Usage: python results/fedrep/make_table.py RUNS_DIR OUT_DIR
Reads RUNS_DIR/<run>/{summary.json,metrics.jsonl}; writes OUT_DIR/table.md,
OUT_DIR/table.csv and OUT_DIR/accuracy.png.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from fedsheaf.rundir.files import read_metrics
from fedsheaf.util.atomic import atomic_write_text, save_figure

ORDER = ["fedrep", "fedavg_ft", "fedavg", "fedper", "lg_fedavg", "local"]
LABEL = {
    "fedrep": "FedRep",
    "fedavg_ft": "FedAvg+FT",
    "fedavg": "FedAvg",
    "fedper": "FedPer",
    "lg_fedavg": "LG-FedAvg",
    "local": "Local",
}
COLUMNS = [
    "algorithm",
    "score",
    "acc_last",
    "final_acc",
    "min_client_acc",
    "shared_params",
    "MB_up",
    "MB_down",
    "wall_s",
    "note",
]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _fedavg_from_ft(
    summary: dict[str, Any], history: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """FedAvg's summary from a FedAvg+FT run: its rounds before the final one.

    FedAvg+FT differs from FedAvg only by the final head round, and the same
    config and seed give the same rounds (tests/mpi/test_server_runs.py checks it).
    """
    main = [r for r in history if not r["final"]]
    last = [r for r in main if "acc" in r][-1]
    out = dict(summary)
    out.update(
        algorithm="fedavg",
        score=summary["acc_last"],
        final_acc=None,
        client_acc=last["client_acc"],
        bytes_up_total=sum(r["bytes_up"] for r in main),
        bytes_down_total=sum(r["bytes_down"] for r in main),
        wall_seconds=None,
        derived=True,
    )
    return out, main


def main(runs: Path, out: Path) -> None:
    summaries = {}
    for s in sorted(runs.glob("*/summary.json")):
        summary = json.loads(s.read_text())
        alg = summary["algorithm"]
        if alg in summaries:  # one row per algorithm: a second seed would replace the first
            sys.exit(
                f"make_table.py: two {alg} runs under {runs}; this table holds one run per "
                f"algorithm. For means over seeds: fedsheaf report {runs} (server_means.md)"
            )
        summaries[alg] = (summary, read_metrics(s.parent / "metrics.jsonl"))
    if not summaries:
        sys.exit(f"make_table.py: no finished runs (<run>/summary.json) under {runs}")
    windows = {tuple(s["score_rounds"]) for s, _ in summaries.values()}
    if len(windows) > 1:
        sys.exit(f"make_table.py: the runs under {runs} score different rounds: {sorted(windows)}")
    if "fedavg" not in summaries and "fedavg_ft" in summaries:
        summaries["fedavg"] = _fedavg_from_ft(*summaries["fedavg_ft"])
    algs = sorted(summaries, key=lambda a: ORDER.index(a) if a in ORDER else 99)
    rows = []
    for a in algs:
        s, _ = summaries[a]
        rows.append(
            {
                "algorithm": LABEL.get(a, a),
                "score": s["score"],
                "acc_last": s["acc_last"],
                "final_acc": s["final_acc"],
                "min_client_acc": min(s["client_acc"]),
                "shared_params": s["shared_params"],
                "MB_up": s["bytes_up_total"] / 1e6,
                "MB_down": s["bytes_down_total"] / 1e6,
                "wall_s": s["wall_seconds"],
                "note": f"rounds 1-{s['rounds']} of the FedAvg+FT run" if s.get("derived") else "",
            }
        )
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(out / "table.csv", buf.getvalue())
    ((lo, hi),) = windows
    md = [
        f"| algorithm | score (%) | mean acc, rounds {lo}-{hi} (%) | after final round (%) "
        "| worst client (%) | shared params | MB up | MB down | wall (s) | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['algorithm']} | **{_pct(r['score'])}** | {_pct(r['acc_last'])} "
            f"| {_pct(r['final_acc'])} | {_pct(r['min_client_acc'])} | {r['shared_params']} "
            f"| {r['MB_up']:.1f} | {r['MB_down']:.1f} "
            f"| {_secs(r['wall_s'])} | {r['note']} |"
        )
    atomic_write_text(out / "table.md", "\n".join(md) + "\n")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    derived = summaries.get("fedavg", ({}, []))[0].get("derived", False)
    for a in algs:
        s, hist = summaries[a]
        main_rounds = [r for r in hist if not r["final"] and "acc" in r]
        only_final = a == "fedavg_ft" and derived  # its rounds are the FedAvg curve
        (line,) = ax.plot(
            [] if only_final else [r["round"] for r in main_rounds],
            [] if only_final else [100 * r["acc"] for r in main_rounds],
            marker=".",
            linestyle="--" if a == "fedavg_ft" else "-",
            zorder=3 if a == "fedavg_ft" else 2,
            label=LABEL.get(a, a) + (" = FedAvg + final head round" if a == "fedavg_ft" else ""),
        )
        final = [r for r in hist if r["final"]]
        if final:
            ax.plot(
                [final[0]["round"]],
                [100 * final[0]["acc"]],
                marker="*",
                ms=12,
                color=line.get_color(),
                linestyle="none",
            )
    ax.axvspan(lo - 0.5, hi + 0.5, color="0.9", zorder=0)
    ax.set_xlabel("round (star: after the final head round)")
    ax.set_ylabel("mean local test accuracy (%)")
    ax.set_title("FashionMNIST, 100 clients x 2 classes (reduced protocol)")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    save_figure(fig, out / "accuracy.png", dpi=120)
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
