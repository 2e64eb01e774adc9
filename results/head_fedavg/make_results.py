"""Tables (Markdown) and a PNG of Gram errors vs round for results/head_fedavg/.

Usage: python results/head_fedavg/make_results.py OUT_DIR
Reads OUT_DIR/ufm/<mode>/ufm.json (``fedsheaf ufm`` outputs, if any) and
OUT_DIR/runs/<run>/{summary.json,metrics.jsonl} (head_fedavg runs); writes
OUT_DIR/ufm_table.md (with UFM outputs), OUT_DIR/table.md and OUT_DIR/gram_errors.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fedsheaf.rundir.files import read_metrics
from fedsheaf.util.atomic import atomic_write_text, save_figure

UFM_MODES = {"exact": "exact selection", "proximal": "proximal, ρ=1e-3", "gamma1": "exact, γ=1"}
RUNS = ["ordinary", "proximal", "aligned", "ordinary_corr", "proximal_corr", "aligned_corr"]


def _e(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"


def ufm_table(out: Path) -> str:
    rows = [
        "| mode | rounds | err G_0→G_⋆ | err G_1→G_⋆ | final err to G_⋆ | final err to G_cen |",
        "|---|---|---|---|---|---|",
    ]
    gap = None
    for mode, label in UFM_MODES.items():
        path = out / "ufm" / mode / "ufm.json"
        if not path.is_file():
            continue
        d = json.loads(path.read_text())
        r = d["rounds"]
        gap = d["gap"]
        rows.append(
            f"| {label} | {len(r) - 1} | {_e(r[0]['rel_err_star'])} | {_e(r[1]['rel_err_star'])}"
            f" | {_e(r[-1]['rel_err_star'])} | {_e(r[-1]['rel_err_cen'])} |"
        )
    if gap is not None:
        t = gap["trace"]
        rows.append(
            f"\nGap G_cen − G_⋆: Tr M_μ = {t['M_mu']:.4f}, Tr M_Σ = {t['M_Sigma']:.4f}, "
            f"Tr M_A = {t['M_A']:.4f} (= BW variance {gap['bw_variance']:.4f}); "
            f"‖G_cen − G_⋆‖/‖G_cen‖ = {gap['relative_gap_to_cen']:.4f}."
        )
    return "\n".join(rows) + "\n"


def _load(out: Path) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    runs = {}
    for name in RUNS:
        d = out / "runs" / name
        if (d / "summary.json").is_file():
            summary = json.loads((d / "summary.json").read_text())
            runs[name] = (summary, read_metrics(d / "metrics.jsonl"))
    return runs


def run_table(runs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> str:
    rows = [
        "| run | ρ | align | γ | e_F(G_T, G_⋆) | d(G_T, G_⋆) | e_F(G_T, G_cen) | d(G_T, G_cen)"
        " | δ_last | local err | traj. err | train MSE | test MSE | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (s, hist) in runs.items():
        f, h = hist[-1], s["head"]
        rows.append(
            f"| {name} | {h['rho']:g} | {'yes' if h['align'] else 'no'} | {h['moment_gamma']:g}"
            f" | {_e(f['gram_err_star'])} | {_e(f['dir_err_star'])} | {_e(f['gram_err_cen'])}"
            f" | {_e(f['dir_err_cen'])} | {_e(f['delta'])} | {_e(f.get('local_err'))}"
            f" | {_e(f['traj_err'])}"
            f" | {s['train_mse']:.3f} | {s['test_mse']:.3f} | {s['wall_seconds']:.0f} |"
        )
    return "\n".join(rows) + "\n"


def plot(runs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]], path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    style = {"ordinary": "C0", "proximal": "C1", "aligned": "C2"}
    panels = [
        (axes[0], "gram_err_star", False, r"$e_F(G_t, G_\star)$, no correction"),
        (axes[1], "gram_err_cen", True, r"$e_F(G_t, G_{cen})$, moment correction $\gamma=1$"),
    ]
    for ax, key, corrected, title in panels:
        for name, (s, hist) in runs.items():
            if name.endswith("_corr") != corrected:
                continue
            rounds = [0] + [r["round"] for r in hist]
            vals = [s["initial"][key]] + [r[key] for r in hist]
            ax.semilogy(rounds, vals, "o-", ms=3, color=style[name.split("_")[0]], label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("round t")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    for name, (_, hist) in runs.items():
        ls = "--" if name.endswith("_corr") else "-"
        ax.semilogy(
            [r["round"] for r in hist],
            [max(r["delta"], 1e-8) for r in hist],
            ls,
            marker="o",
            ms=3,
            color=style[name.split("_")[0]],
            label=name,
        )
    ax.set_title(r"$\delta_t$: uploads vs selected heads $\Pi_m(W_t)$ (relative)", fontsize=10)
    ax.set_xlabel("round t")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    s = next(iter(runs.values()))[0]
    fig.suptitle(
        f"Head-only FedAvg, {s['name']} ({s['n_clients']} clients, {s['rounds']} rounds)",
        fontsize=11,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def main(out_dir: str) -> int:
    out = Path(out_dir)
    if (out / "ufm").is_dir():
        atomic_write_text(out / "ufm_table.md", ufm_table(out))
        print((out / "ufm_table.md").read_text())
    runs = _load(out)
    if runs:
        atomic_write_text(out / "table.md", run_table(runs))
        plot(runs, out / "gram_errors.png")
        print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/head_fedavg"))
