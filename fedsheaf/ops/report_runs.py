"""Per-run overview for ``fedsheaf report``: one table row and one curve per run directory.

Works on any mix of run directories of both families (see :mod:`fedsheaf.rundir.files`):

* decentralized / hub (sheaf_frl, noncoop, comfed, sheaf_fmtl, fedproto, fedmuscle):
  one ``metrics.jsonl`` record per *epoch* with ``private_acc``, ``comm_acc``,
  ``bytes_sent`` (+ ``eval_bytes_sent``);
* server-based (fedavg, fedrep, ..., head_fedavg): one record per *round* with ``acc``
  (every ``eval_every`` rounds; ``head_fedavg`` has ``test_mse`` instead), ``bytes_up``
  and ``bytes_down``.

A run directory is any folder with a ``config.yaml`` beside one of
:data:`fedsheaf.rundir.files.RUN_MARKS` (``metrics.jsonl``, ``summary.json``, checkpoints,
``failed.json``, ``stopped.json``); runs without a ``summary.json`` are listed as
failed, stopped, interrupted (no job holds the run's lock, :func:`fedsheaf.rundir.run_lock.probe`:
its job was killed outright) or running.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fedsheaf.config.sections import SERVER_BASED, flat_keys, read_yaml
from fedsheaf.rundir import run_lock
from fedsheaf.rundir.files import (
    RUN_MARKS,
    is_run_dir,
    outermost_runs,
    read_failure,
    read_json_object,
    read_metrics,
    read_stop,
)
from fedsheaf.util.atomic import atomic_write_text, save_figure
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import get_logger
from fedsheaf.util.units import count, human_bytes

logger = get_logger(__name__)

T = TypeVar("T")


#: Config keys that may differ between the seeds of one setting: they change no number
#: (where files go, checkpointing, evaluation cadence, exchange overlap, recomputed pilot
#: forwards, which rank holds which agents or a server's clients, released memory), or,
#: for the device, only as another device's arithmetic and random streams do.
SEED_INDEPENDENT = (
    "seed",
    "name",
    "output.",
    "checkpoint.",
    "train.eval_every",
    "federated.eval_every",
    "train.device",
    "data.root",
    "data.download",
    "sheaf.overlap_exchange",
    "sheaf.recompute_pilots",
    "train.placement",
    "train.release_memory",
    "federated.placement",
)

DECENTRALIZED_COLS = ("private_acc", "comm_acc", "comm_acc_deg", "score_val")
SERVER_COLS = ("acc", "score", "final_acc", "test_mse", "gram_err_star")
BASE_COLS = (
    "run",
    "algorithm",
    "family",
    "seed",
    "status",
    "steps",
    "wall_seconds",
    "bytes",
    "eval_bytes",
)


@dataclass
class RunInfo:
    """One run directory, read once: config, per-step records, summary (None if running)."""

    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    summary: dict[str, Any] | None
    final: dict[str, Any] = field(default_factory=dict)
    #: How tables and figures name the run (:func:`tell_apart`); its folder's name if unset.
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.path.name

    @property
    def algorithm(self) -> str:
        return str(self.config.get("algorithm"))

    @property
    def family(self) -> str:
        return "server" if self.algorithm in SERVER_BASED else "decentralized"

    @property
    def step_key(self) -> str:
        return "round" if self.family == "server" else "epoch"


def load_run(path: str | Path) -> RunInfo:
    """Read one run directory (``config.yaml`` required; metrics and summary optional)."""
    path = Path(path)
    if not (path / "config.yaml").is_file():
        raise ConfigError(f"{path} is not a run directory (no config.yaml)")
    damaged: list[int] = []
    metrics = path / "metrics.jsonl"
    records = read_metrics(metrics, damaged) if metrics.is_file() else []
    if damaged:
        lines = ", ".join(map(str, damaged[:5])) + (", …" if len(damaged) > 5 else "")
        logger.warning(
            f"report: warning: {metrics}: {count(len(damaged), 'damaged line')} ({lines}) "
            "left out, so this run's totals leave out those records (resuming the run "
            "rewrites the file from its checkpoint)"
        )
    summary = None
    if (path / "summary.json").is_file():
        summary = read_json_object(path / "summary.json")
    info = RunInfo(path, read_yaml(path / "config.yaml", what="run config"), records, summary)
    info.final = final_metrics(info)
    return info


def find_runs(paths: list[str | Path]) -> list[RunInfo]:
    """Every run directory at or below ``paths`` (sorted by path, each once)."""
    dirs: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"no such run or study directory: {p}")
        for cfg in [p / "config.yaml", *p.rglob("config.yaml")]:
            d = cfg.parent
            if is_run_dir(d):
                dirs.add(d.resolve())
    if not dirs:
        where = ", ".join(map(str, paths))
        marks = ", ".join(RUN_MARKS)
        studies = [Path(p) for p in paths if (Path(p) / "study.json").is_file()]
        hint = (
            f"; {studies[0]} is a sweep none of whose runs has started (its logs/ say why "
            "a launch failed)"
            if studies
            else ""
        )
        raise ConfigError(
            f"no run directories (config.yaml with one of {marks}) under {where}{hint}"
        )
    return tell_apart(readable(outermost_runs(dirs), load_run))


def tell_apart(runs: list[RunInfo]) -> list[RunInfo]:
    """Label each run by its folder's name, with as many parent folders as it takes to
    tell apart runs whose folders share a name (two sweeps' ``fedavg-seed0``: their rows
    and legend entries would read alike)."""
    labels = [run.path.name for run in runs]
    for depth in range(2, max((len(run.path.parts) for run in runs), default=0) + 1):
        seen = Counter(labels)
        if all(seen[label] == 1 for label in labels):
            break
        labels = [
            "/".join(run.path.parts[-depth:]) if seen[label] > 1 else label
            for run, label in zip(runs, labels, strict=True)
        ]
    for run, label in zip(runs, labels, strict=True):
        run.label = label
    return runs


def readable(dirs: list[Path], read: Callable[[Path], T]) -> list[T]:
    """``read`` of every run in ``dirs``; one that cannot be read (a damaged summary.json
    or config.yaml) is skipped with a warning, unless none can."""
    out, skipped = [], []
    for d in dirs:
        try:
            out.append(read(d))
        except ConfigError as exc:
            skipped.append(str(exc))
            logger.warning(f"report: warning: skipping {d}: {exc}")
    if skipped and not out:
        raise ConfigError(skipped[0])
    return out


def seed_independent(key: str) -> bool:
    """Whether the dotted config ``key`` may differ between the seeds of one setting."""
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in SEED_INDEPENDENT)


def _with_acc(records: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get(key) is not None]


def step_bytes(run: RunInfo, record: dict[str, Any]) -> int:
    """Bytes one epoch/round of training moved: sent along the graph (plus up + down to a
    server for the centralized baselines), or up + down for the server-based family.

    A decentralized evaluation's own traffic (test latents sent along the edges to score
    communication accuracy, which every method pays alike, the non-cooperative one too)
    is not the method's: :func:`eval_bytes` counts it apart.
    """
    if run.family == "server":
        return int(record.get("bytes_up") or 0) + int(record.get("bytes_down") or 0)
    graph = int(record.get("bytes_sent") or 0)
    server = int(record.get("server_bytes_sent") or 0) + int(
        record.get("server_bytes_received") or 0
    )
    return graph + server  # the server's line: FedProto and FedMuscle


def eval_bytes(record: dict[str, Any]) -> int:
    """Bytes a decentralized evaluation sent along the edges (test latents)."""
    return int(record.get("eval_bytes_sent") or 0)


def final_metrics(run: RunInfo) -> dict[str, Any]:
    """The family's final numbers: from summary.json, else from the last metrics record."""
    s = run.summary or {}
    recs = run.records
    out: dict[str, Any] = {}
    if run.family == "decentralized":
        last = (_with_acc(recs, "private_acc") or [{}])[-1]
        for k in DECENTRALIZED_COLS:
            out[k] = s.get(k, last.get(k))
    else:
        last_acc = (_with_acc(recs, "acc") or [{}])[-1]
        last_mse = (_with_acc(recs, "test_mse") or [{}])[-1]
        out["acc"] = s.get("acc_last", last_acc.get("acc"))
        out["score"] = s.get("score")
        out["final_acc"] = s.get("final_acc")
        out["test_mse"] = s.get("test_mse", last_mse.get("test_mse"))
        out["gram_err_star"] = (s.get("final") or {}).get(
            "gram_err_star", last_mse.get("gram_err_star")
        )
    steps = [
        r[run.step_key]
        for r in recs
        if isinstance(r.get(run.step_key), int) and not r.get("final")  # not the fine-tune
    ]
    out["steps"] = max(steps) if steps else None
    wall = s.get("wall_seconds")
    out["wall_seconds"] = (
        wall if wall is not None else sum(float(r.get("seconds") or 0) for r in recs)
    )
    if "bytes_up_total" in s:
        out["bytes"] = int(s["bytes_up_total"]) + int(s.get("bytes_down_total") or 0)
    else:
        out["bytes"] = sum(step_bytes(run, r) for r in recs)
    out["eval_bytes"] = sum(eval_bytes(r) for r in recs) if run.family == "decentralized" else None
    out["peak_rss_bytes"] = (s.get("memory") or {}).get("peak_rss_bytes_max")
    return out


def _status(run: RunInfo) -> str:
    if run.summary is not None:
        return "finished"
    if read_failure(run.path) is not None:
        return "failed"
    if read_stop(run.path) is not None:
        return "stopped"
    # no job holds it: killed outright (SIGKILL, a lost node), to be resumed
    return "interrupted" if run_lock.probe(run.path) is False else "running"


def run_row(run: RunInfo) -> dict[str, Any]:
    """One table row: name, algorithm, family, seed, status, and the final numbers."""
    return {
        "run": run.name,
        "algorithm": run.algorithm,
        "family": run.family,
        "seed": run.config.get("seed"),
        "status": _status(run),
        **run.final,
    }


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-2 else f"{value:.3f}"
    return str(value)


def csv_cell(value: Any) -> Any:
    """A CSV cell: a missing value (None; NaN, e.g. the std of one seed; -inf, no
    validation score) is empty in every CSV fedsheaf writes."""
    missing = value is None or (isinstance(value, float) and not math.isfinite(value))
    return "" if missing else value


def runs_table_csv(runs: list[RunInfo]) -> str:
    """All runs, both families' metric columns (blank where a family has none)."""
    buf = io.StringIO()
    rows = [run_row(run) for run in runs]
    cols = [*BASE_COLS, *DECENTRALIZED_COLS, *SERVER_COLS]
    if any(row["peak_rss_bytes"] is not None for row in rows):  # (runs from before: none)
        cols.append("peak_rss_bytes")
    w = csv.DictWriter(buf, cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


def runs_table_markdown(runs: list[RunInfo]) -> str:
    """One Markdown table per family present, each with that family's metric columns."""
    parts = []
    for family, title, step, metric_cols in (
        ("decentralized", "Decentralized runs", "epochs", DECENTRALIZED_COLS),
        ("server", "Server-based runs", "rounds", SERVER_COLS),
    ):
        mine = [r for r in runs if r.family == family]
        if not mine:
            continue
        rows = [run_row(r) for r in mine]
        # drop metric columns no run of this family has (e.g. test_mse for classifiers)
        cols = [c for c in metric_cols if any(row.get(c) is not None for row in rows)]
        traffic = ["train bytes", "eval bytes"] if family == "decentralized" else ["bytes"]
        memory = any(row["peak_rss_bytes"] is not None for row in rows)
        head = ["run", "algorithm", "seed", "status", step, *cols, "wall s", *traffic]
        head += ["peak RSS a rank"] if memory else []
        lines = [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            cells = [row["run"], row["algorithm"], _fmt(row["seed"]), row["status"]]
            cells += [_fmt(row["steps"]), *(_fmt(row.get(c)) for c in cols)]
            cells += [_fmt(row["wall_seconds"]), human_bytes(row["bytes"])]
            if family == "decentralized":
                cells.append(human_bytes(row["eval_bytes"]))
            if memory:
                cells.append(human_bytes(row["peak_rss_bytes"]))
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


#: Suffix of a curve's points after the final fine-tuning round (FedRep, FedAvg-FT).
FINAL = "@final"


def _curves(run: RunInfo) -> dict[str, tuple[list[int], list[float]]]:
    """Metric name → (steps, values) of the run's learning curves; ``name@final``: its
    value after a final fine-tuning round (drawn apart: it is no round of training)."""
    key = run.step_key
    names = ("private_acc", "comm_acc") if run.family == "decentralized" else ("acc", "test_mse")
    out: dict[str, tuple[list[int], list[float]]] = {}
    for name in (*names, "loss"):
        for r in run.records:
            if isinstance(r.get(key), int) and r.get(name) is not None:
                xs, ys = out.setdefault(name + (FINAL if r.get("final") else ""), ([], []))
                xs.append(r[key])
                ys.append(float(r[name]))
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: Legend entries per column: a longer legend takes more columns, in smaller type.
LEGEND_ROWS = 18
#: Beyond this many entries a figure draws no legend (it says so; runs_table.md names them).
MAX_LEGEND = 90
#: A run evaluated fewer times than this gets its evaluations said in the learning curves.
SPARSE = 3
#: Markers of runs whose colour another run has too (beyond tab20's twenty colours).
MARKERS = (".", "s", "^", "v", "D")
#: A seed in a run's name (``sheaf_frl-d64-seed2``), dropped from a group's legend entry.
SEED_IN_NAME = re.compile(r"[-_.]?seed[-_=]?\d+")


def run_colours(n: int) -> list[Any]:
    """One colour per run (per legend entry): matplotlib's ten default colours, and for
    more the twenty of ``tab20``, so that run 11 is not drawn in run 1's colour (beyond
    twenty, :func:`run_looks` gives the repeated colours other markers)."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    palette = _pyplot().get_cmap("tab20").colors
    return [palette[i % len(palette)] for i in range(n)]


def _seed_list(seeds: list[Any]) -> str:
    if len(seeds) > 4:
        return f"{len(seeds)} seeds"
    ordered = sorted(seeds, key=lambda s: (not isinstance(s, int), s if isinstance(s, int) else 0))
    return "seeds " + ", ".join(map(str, ordered))


def legend_groups(runs: list[RunInfo]) -> list[tuple[str, list[int]]]:
    """(legend label, indices of its runs), one per legend entry, in the runs' order: the
    seeds of one setting (equal configs but for the seed and the :data:`SEED_INDEPENDENT`
    keys, each seed once) share an entry and a colour, ``name (seeds 0, 1, 2)``; any other
    run has its own."""
    keyed: dict[tuple[Any, ...], list[int]] = {}
    for i, run in enumerate(runs):
        items = _setting_items(run)
        keyed.setdefault(tuple(sorted((k, repr(v)) for k, v in items.items())), []).append(i)
    out: list[tuple[str, list[int]]] = []
    for members in keyed.values():
        seeds = [runs[i].config.get("seed") for i in members]
        distinct = None not in seeds and len({repr(s) for s in seeds}) == len(seeds)
        if len(members) > 1 and distinct:
            bases = {SEED_IN_NAME.sub("", runs[i].name) for i in members}
            base = bases.pop() if len(bases) == 1 else f"{runs[members[0]].name} and others"
            out.append((f"{base} ({_seed_list(seeds)})", members))
        else:
            out.extend((runs[i].name, [i]) for i in members)
    out.sort(key=lambda entry: entry[1][0])
    return out


@dataclass
class Looks:
    """How a figure draws each run, and its legend's entries."""

    #: per run: colour, marker, and the legend entry it belongs to
    colour: list[Any]
    marker: list[str]
    entry: list[int]
    labels: list[str]


def run_looks(runs: list[RunInfo]) -> Looks:
    """Colours and markers per run: one colour per legend entry (:func:`legend_groups`)."""
    groups = legend_groups(runs)
    colours = run_colours(len(groups))
    n = len(runs)
    look = Looks([None] * n, ["."] * n, [0] * n, [label for label, _ in groups])
    for g, (_, members) in enumerate(groups):
        for i in members:
            look.colour[i], look.entry[i] = colours[g], g
            look.marker[i] = MARKERS[(g // 20) % len(MARKERS)] if len(groups) > 20 else "."
    return look


def _legend_shape(labels: list[str]) -> tuple[int, str, float]:
    """(columns, font size, width in inches) of a legend of ``labels``."""
    n = len(labels)
    if n == 0 or n > MAX_LEGEND:
        return 0, "small", 0.0
    small = n <= LEGEND_ROWS
    columns = 1 if small else math.ceil(n / (LEGEND_ROWS + 4))  # x-small: more rows fit
    chars = max(len(label) for label in labels)
    width = columns * (0.5 + chars * (0.068 if small else 0.058))
    return columns, "small" if small else "x-small", width


def _figure(plt: Any, panels: int, panel_width: float, look: Looks, sharex: bool = True) -> Any:
    """A row of ``panels`` panels, widened to hold the legend beside them."""
    _, _, legend_width = _legend_shape(look.labels)
    fig, axes = plt.subplots(
        1,
        panels,
        figsize=(panel_width * panels + legend_width, 4),
        squeeze=False,
        sharex=sharex,
        layout="constrained",
    )
    return fig, axes[0]


def _legend(fig: Any, handles: dict[int, Any], look: Looks) -> None:
    """One entry per run (per group of seeds) right of the panels, in as many columns as
    it takes; beyond :data:`MAX_LEGEND` entries a line says why there is none."""
    shown = sorted(handles)
    if len(shown) > MAX_LEGEND:
        fig.suptitle(
            f"{count(len(shown), 'run')}: too many to name in a legend (runs_table.md names them)",
            fontsize="small",
        )
        return
    if shown:
        columns, size, _ = _legend_shape([look.labels[g] for g in shown])
        fig.legend(
            [handles[g] for g in shown],
            [look.labels[g] for g in shown],
            loc="outside right upper",
            fontsize=size,
            ncols=columns,
        )


def _wide_positive(ax: Any) -> bool:
    """Whether the plotted values are positive and span enough decades for a log axis."""
    ys = [float(y) for line in ax.lines for y in line.get_ydata()]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 20


def plot_learning_curves(runs: list[RunInfo], path: Path) -> Path:
    """Accuracy (and test MSE, training loss) against epoch/round, one colour per run."""
    return save_figure(learning_curves_figure(runs), path, dpi=110)


def _unit(runs: list[RunInfo]) -> str:
    units = {run.step_key for run in runs}
    return units.pop() if len(units) == 1 else "epoch / round"


def sparse_note(runs: list[RunInfo], steps: dict[int, list[int]]) -> str | None:
    """What a panel of evaluated numbers says when a run was evaluated fewer than
    :data:`SPARSE` times (``steps``: run index -> its evaluated epochs/rounds): when."""
    sparse = {i: xs for i, xs in steps.items() if len(xs) < SPARSE}
    if not sparse:
        return None
    at = sorted({x for xs in sparse.values() for x in xs})
    unit = _unit([runs[i] for i in sparse])
    where = f"{unit}{'s' if len(at) > 1 and '/' not in unit else ''} " + ", ".join(map(str, at[:8]))
    where += ", …" if len(at) > 8 else ""
    who = "every run" if len(sparse) == len(steps) else f"{len(sparse)} of {len(steps)} runs"
    keys = set()
    for i in sparse:
        run = runs[i]
        section = "federated" if run.family == "server" else "train"
        value = (run.config.get(section) or {}).get("eval_every")
        keys.add(f"{section}.eval_every={value}" if value is not None else "")
    why = f" ({keys.pop()})" if len(keys) == 1 and "" not in keys else ""
    return f"sparse evaluation: {who} evaluated only at {where}{why}"


def learning_curves_figure(runs: list[RunInfo]) -> Any:
    """The figure :func:`plot_learning_curves` writes."""
    plt = _pyplot()
    curves = [_curves(r) for r in runs]
    panels = [
        (title, names, log)
        for title, names, log in (
            ("test accuracy", ("private_acc", "comm_acc", "acc"), False),
            ("test MSE", ("test_mse",), True),
            ("training loss", ("loss",), True),
        )
        if any(n in c for c in curves for n in names)
    ] or [("test accuracy", ("acc",), False)]
    look = run_looks(runs)
    # one epoch axis: a run evaluated only at its end still sits at its end
    fig, axes = _figure(plt, len(panels), 5, look)
    # communication accuracy: dashed, and crosses for runs evaluated too rarely for a line
    styles = {"comm_acc": ("--", "x")}
    handles: dict[int, Any] = {}  # one legend entry per run (per group of seeds)
    for ax, (title, names, log) in zip(axes, panels, strict=True):
        evaluated: dict[int, list[int]] = {}
        for i, run_curves in enumerate(curves):
            for n in names:
                if n in run_curves:
                    xs, ys = run_curves[n]
                    evaluated.setdefault(i, xs)
                    style, marker = styles.get(n, ("-", look.marker[i]))
                    size = 9 if len(xs) < SPARSE else 6  # a lone point is seen
                    (line,) = ax.plot(
                        xs, ys, style, marker=marker, markersize=size, color=look.colour[i]
                    )
                    handles.setdefault(look.entry[i], line)
                if n + FINAL in run_curves:
                    xs, ys = run_curves[n + FINAL]
                    (line,) = ax.plot(xs, ys, "*", markersize=10, color=look.colour[i])
                    handles.setdefault(look.entry[i], line)
        if "comm_acc" in names and any("comm_acc" in c for c in curves):
            title += " (dashed, x: comm.)"
        if any(n + FINAL in c for c in curves for n in names):
            title += " (*: after fine-tuning)"
        ax.set_xlabel(_unit(runs))
        _whole_steps(ax)
        ax.set_title(title)
        if log and _wide_positive(ax):
            ax.set_yscale("log")
        note = sparse_note(runs, evaluated) if names != ("loss",) else None
        if note is not None:
            ax.text(
                0.03,
                0.97,
                textwrap.fill(note, 38),
                transform=ax.transAxes,
                ha="left",
                va="top",
                fontsize="small",
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.7"},
            )
        ax.grid(alpha=0.3)
    _legend(fig, handles, look)
    return fig


def _whole_steps(ax: Any) -> None:
    """Epochs and rounds are whole numbers: no ticks at 1.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def bytes_series(runs: list[RunInfo]) -> tuple[dict[int, list[tuple[int, int]]], list[str]]:
    """(run index → its (step, training bytes) points, names of the runs that moved none:
    noncoop, drawn at 0 on a linear axis, named instead on a log one)."""
    series, silent = {}, []
    for i, run in enumerate(runs):
        key = run.step_key
        pts = [(r[key], step_bytes(run, r)) for r in run.records if isinstance(r.get(key), int)]
        if pts and not any(y for _, y in pts):
            silent.append(run.name)
        elif pts:
            series[i] = pts
    return series, silent


def eval_series(runs: list[RunInfo]) -> dict[int, list[tuple[int, int]]]:
    """Run index → its (epoch, evaluation bytes) points: what each evaluation of a
    decentralized run sent along the edges (:func:`eval_bytes`), for runs that sent any."""
    out = {}
    for i, run in enumerate(runs):
        if run.family != "decentralized":
            continue
        pts = [
            (r["epoch"], eval_bytes(r))
            for r in run.records
            if isinstance(r.get("epoch"), int) and "eval_bytes_sent" in r
        ]
        if any(y for _, y in pts):
            out[i] = pts
    return out


def plot_bytes(runs: list[RunInfo], path: Path) -> Path:
    """Training bytes per epoch/round per run (:func:`step_bytes`: decentralized, sent
    without the evaluation's; server-based, up + down), and beside them what each
    evaluation of a decentralized run sent (:func:`eval_series`)."""
    return save_figure(bytes_figure(runs), path, dpi=110)


BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def _in_unit(value: float, top: float) -> str:
    """``value`` bytes in the unit of ``top`` (``12.5 MB``)."""
    unit, scale = next(((u, s) for u, s in BYTE_UNITS if top >= s), ("B", 1.0))
    return f"{value / scale:.4g} {unit}"


def _byte_ticks(ax: Any) -> None:
    """Bytes on the y ticks in words: ``0 MB``, ``5 MB``, ``10 MB`` on a linear axis (one
    unit, the top's), ``10 B``, ``100 kB``, ``1 MB`` on a log one (1, 2, 5 per decade where
    the axis spans two decades or less); never matplotlib's "1e7" above the axis, over the
    title, nor its "4×10⁶" on the minor ticks (and no label below 0)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if ax.get_yscale() != "log":
        ax.yaxis.set_major_formatter(
            FuncFormatter(lambda v, _: _in_unit(v, ax.get_ylim()[1]) if v >= 0 else "")
        )
        return
    low, high = ax.get_ylim()
    if high / max(low, 1e-12) <= 100:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _in_unit(v, v) if v > 0 else ""))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _scale_bytes(ax: Any) -> bool:
    """A log axis for values over decades, else a linear one from 0 (a flat line reads as
    what it is, not as noise on a zoomed axis); returns whether it is linear."""
    if _wide_positive(ax):
        ax.set_yscale("log")
        return False
    top = max((float(y) for line in ax.lines for y in line.get_ydata()), default=0.0)
    ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)
    return True


def bytes_figure(runs: list[RunInfo]) -> Any:
    """The figure :func:`plot_bytes` writes."""
    plt = _pyplot()
    series, silent = bytes_series(runs)
    evals = eval_series(runs)
    look = run_looks(runs)
    fig, axes = _figure(plt, 2 if evals else 1, 5.5 if evals else 6, look)
    handles: dict[int, Any] = {}
    ax = axes[0]
    for i, pts in series.items():
        xs, ys = zip(*pts, strict=True)
        (line,) = ax.plot(xs, ys, marker=look.marker[i], color=look.colour[i])
        handles.setdefault(look.entry[i], line)
    quiet = [i for i, run in enumerate(runs) if run.name in silent]
    named = list(dict.fromkeys(look.labels[look.entry[i]] for i in quiet))
    title = "training traffic"
    if _scale_bytes(ax):  # the runs that sent nothing: a line at 0
        for i in quiet:
            key = runs[i].step_key
            steps = [r[key] for r in runs[i].records if isinstance(r.get(key), int)]
            (line,) = ax.plot(
                steps, [0] * len(steps), marker=look.marker[i], color=look.colour[i], clip_on=False
            )
            handles.setdefault(look.entry[i], line)
        if named:
            title += "\n" + _names_note("at 0 (no training traffic)", named)
    elif named:
        title += "\n" + _names_note("not drawn on the log axis (no training traffic)", named)
    ax.set_title(title, fontsize="medium")
    finals = any(r.get("final") for run in runs for r in run.records)
    ax.set_xlabel(
        _unit(runs) + (" (a final fine-tuning round is drawn after the last)" if finals else "")
    )
    ax.set_ylabel(f"bytes per {_unit(runs)}")
    if evals:
        _eval_panel(axes[1], runs, evals, look, handles)
    for a in axes:
        _whole_steps(a)
        _byte_ticks(a)
        a.grid(alpha=0.3)
    _legend(fig, handles, look)
    return fig


def _eval_panel(
    ax: Any,
    runs: list[RunInfo],
    evals: dict[int, list[tuple[int, int]]],
    look: Looks,
    handles: dict[int, Any],
) -> None:
    """What each evaluation sent, per run; a run evaluated rarely gets its values written
    beside its points."""
    for i, pts in evals.items():
        xs, ys = zip(*pts, strict=True)
        (line,) = ax.plot(xs, ys, marker=look.marker[i], markersize=8, color=look.colour[i])
        handles.setdefault(look.entry[i], line)
    _scale_bytes(ax)
    for x, low, high in _nearby(
        [pt for pts in evals.values() if len(pts) < SPARSE for pt in pts], ax.get_ylim()
    ):
        ax.annotate(
            human_bytes(low) if low == high else f"{human_bytes(low)} – {human_bytes(high)}",
            (x, (low + high) / 2),
            xytext=(-9, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize="small",
        )
    what = "test latents along the edges"
    if any(runs[i].algorithm == "noncoop" for i in evals):
        what += "; noncoop: + pilot features"
    ax.set_title(f"evaluation traffic\n({what})", fontsize="medium")
    ax.set_xlabel("epoch")
    ax.set_ylabel("bytes per evaluation")


def _nearby(points: list[tuple[int, int]], ylim: tuple[float, float]) -> list[tuple[int, int, int]]:
    """``(x, lowest, highest)`` of ``points`` at one x whose values lie within 4% of the
    axis of each other (one label for them, not labels drawn over each other)."""
    out: list[tuple[int, int, int]] = []
    span = 0.04 * (ylim[1] - ylim[0])
    for x, y in sorted(set(points)):
        if out and out[-1][0] == x and y - out[-1][2] <= span:
            out[-1] = (x, out[-1][1], y)
        else:
            out.append((x, y, y))
    return out


def _names_note(what: str, names: list[str]) -> str:
    """``what: a, b`` over lines of a panel's width (``what: 3 runs`` when the names
    would take more than two)."""
    shown = ", ".join(names)
    if len(shown) > 110:
        shown = count(len(names), "run")
    return textwrap.fill(f"{what}: {shown}", 62)


#: The server-based numbers :func:`server_seed_means` averages over seeds.
SERVER_MEAN_COLS = ("score", "acc", "final_acc", "test_mse", "gram_err_star")


@dataclass
class SeedGroup:
    """The finished server-based runs of one setting: equal configs but for the seed
    (and :data:`SEED_INDEPENDENT` keys)."""

    algorithm: str
    #: what sets the group apart from the other groups of its algorithm (``k=v, ...``)
    setting: str
    runs: list[RunInfo]

    @property
    def seeds(self) -> list[Any]:
        return [r.config.get("seed") for r in self.runs]

    @property
    def score_is(self) -> str:
        return str((self.runs[0].summary or {}).get("score_is") or "–")


def _plain(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _setting_items(run: RunInfo) -> dict[str, Any]:
    return {k: v for k, v in flat_keys(run.config).items() if not seed_independent(k)}


def server_seed_groups(runs: list[RunInfo]) -> list[SeedGroup]:
    """Group the finished server-based runs by setting; say (on stderr) where a group
    holds one seed twice, which its mean would count as two seeds."""
    finished = [r for r in runs if r.family == "server" and r.summary is not None]
    items = {id(r): _setting_items(r) for r in finished}
    out = []
    for alg in sorted({r.algorithm for r in finished}):
        mine = [r for r in finished if r.algorithm == alg]
        # keys every run has (a config.yaml written before a key existed lacks it)
        common = sorted(set.intersection(*(set(items[id(r)]) for r in mine)))
        groups: dict[tuple[str, ...], list[RunInfo]] = {}
        for r in mine:
            groups.setdefault(tuple(repr(items[id(r)][k]) for k in common), []).append(r)
        differ = [i for i, k in enumerate(common) if len({key[i] for key in groups}) > 1]
        for members in groups.values():
            here = items[id(members[0])]
            shown = [f"{common[i]}={_plain(here[common[i]])}" for i in differ]
            members.sort(key=lambda r: (str(r.config.get("seed")), str(r.path)))
            out.append(SeedGroup(alg, ", ".join(shown) or "–", members))
            _warn_repeated_seeds(out[-1])
    out.sort(key=lambda g: (g.algorithm, g.setting))
    return out


def _warn_repeated_seeds(group: SeedGroup) -> None:
    seeds = [str(s) for s in group.seeds]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        names = ", ".join(str(r.path) for r in group.runs)
        logger.warning(
            f"report: warning: {len(group.runs)} {group.algorithm} runs of one setting share "
            f"seed {', '.join(repeated)} and are averaged as if they were different seeds: "
            f"{names}"
        )


def _mean_std(values: list[Any]) -> tuple[float | None, float | None]:
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def server_seed_means(groups: list[SeedGroup]) -> list[dict[str, Any]]:
    """One row per group: seeds, rounds, and mean and std over seeds of
    :data:`SERVER_MEAN_COLS` (None where no run has the number; std None for one seed)."""
    rows = []
    for g in groups:
        steps = sorted({r.final.get("steps") for r in g.runs}, key=lambda v: (v is None, v))
        row: dict[str, Any] = {
            "algorithm": g.algorithm,
            "setting": g.setting,
            "seeds": len(g.runs),
            "seed_list": " ".join(str(s) for s in g.seeds),
            "rounds": "/".join(_fmt(v) for v in steps),
            "score_is": g.score_is,
        }
        for col in SERVER_MEAN_COLS:
            row[f"{col}_mean"], row[f"{col}_std"] = _mean_std([r.final.get(col) for r in g.runs])
        rows.append(row)
    return rows


def _pm(mean: float | None, std: float | None) -> str:
    return _fmt(mean) if std is None else f"{_fmt(mean)} ± {_fmt(std)}"


def server_means_markdown(rows: list[dict[str, Any]]) -> str:
    """The seed means as a Markdown table (columns no group has left out)."""
    cols = [c for c in SERVER_MEAN_COLS if any(r[f"{c}_mean"] is not None for r in rows)]
    head = ["algorithm", "setting", "seeds", "rounds", *cols, "score is"]
    lines = [
        "## Server-based runs: mean ± std over seeds",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [r["algorithm"], r["setting"], f"{r['seeds']} ({r['seed_list']})", r["rounds"]]
        cells += [_pm(r[f"{c}_mean"], r[f"{c}_std"]) for c in cols]
        lines.append("| " + " | ".join([*cells, r["score_is"]]) + " |")
    return "\n".join(lines) + "\n"


def server_means_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, list(rows[0]), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


def write_runs_report(
    runs: list[RunInfo], out: Path, means: list[dict[str, Any]] | None = None
) -> list[Path]:
    """Write runs_table.md/.csv, learning_curves.png and bytes_per_round.png under ``out``,
    and server_means.md/.csv where there are finished server-based runs (``means``:
    :func:`server_seed_means`, computed here if not given)."""
    written = []
    md = "# Runs\n\n" + runs_table_markdown(runs)
    texts = [("runs_table.md", md), ("runs_table.csv", runs_table_csv(runs))]
    if means is None:
        means = server_seed_means(server_seed_groups(runs))
    if means:
        texts.append(("server_means.md", "# Seed means\n\n" + server_means_markdown(means)))
        texts.append(("server_means.csv", server_means_csv(means)))
    else:  # not left from an earlier report into the same folder
        for name in ("server_means.md", "server_means.csv"):
            (out / name).unlink(missing_ok=True)
    for name, text in texts:
        written.append(atomic_write_text(out / name, text))
    written.append(plot_learning_curves(runs, out / "learning_curves.png"))
    written.append(plot_bytes(runs, out / "bytes_per_round.png"))
    return written
