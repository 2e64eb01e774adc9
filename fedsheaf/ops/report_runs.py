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
import statistics
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
#: (where files go, checkpointing, evaluation cadence, exchange overlap, where a server's
#: clients train), or, for the device, only as another device's arithmetic and random
#: streams do.
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


MAX_LEGEND = 20


def run_colours(n: int) -> list[Any]:
    """One colour per run: matplotlib's ten default colours, and for more runs (up to
    :data:`MAX_LEGEND`, beyond which no legend tells them apart anyway) the twenty of
    ``tab20``, so that run 11 is not drawn in run 1's colour."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    palette = _pyplot().get_cmap("tab20").colors
    return [palette[i % len(palette)] for i in range(n)]


def _legend(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """Run names right of the panels (left out when there are too many to read)."""
    if handles and len(handles) <= MAX_LEGEND:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")


def _wide_positive(ax: Any) -> bool:
    """Whether the plotted values are positive and span enough decades for a log axis."""
    ys = [float(y) for line in ax.lines for y in line.get_ydata()]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 20


def plot_learning_curves(runs: list[RunInfo], path: Path) -> Path:
    """Accuracy (and test MSE, training loss) against epoch/round, one colour per run."""
    return save_figure(learning_curves_figure(runs), path, dpi=110)


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
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(5 * len(panels) + 2, 4),
        squeeze=False,
        sharex=True,  # one epoch axis: a run evaluated only at its end still sits at its end
        layout="constrained",
    )
    # communication accuracy: dashed, and crosses for runs evaluated too rarely for a line
    styles = {"comm_acc": ("--", "x")}
    handles: dict[int, Any] = {}  # one legend entry per run
    colours = run_colours(len(runs))
    for ax, (title, names, log) in zip(axes[0], panels, strict=True):
        for i, run_curves in enumerate(curves):
            for n in names:
                if n in run_curves:
                    xs, ys = run_curves[n]
                    style, marker = styles.get(n, ("-", "."))
                    (line,) = ax.plot(xs, ys, style, marker=marker, color=colours[i])
                    handles.setdefault(i, line)
                if n + FINAL in run_curves:
                    xs, ys = run_curves[n + FINAL]
                    (line,) = ax.plot(xs, ys, "*", markersize=10, color=colours[i])
                    handles.setdefault(i, line)
        if "comm_acc" in names and any("comm_acc" in c for c in curves):
            title += " (dashed, x: comm.)"
        if any(n + FINAL in c for c in curves for n in names):
            title += " (*: after fine-tuning)"
        ax.set_xlabel("epoch / round")
        _whole_steps(ax)
        ax.set_title(title)
        if log and _wide_positive(ax):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    _legend(fig, [handles[i] for i in sorted(handles)], [runs[i].name for i in sorted(handles)])
    return fig


def _whole_steps(ax: Any) -> None:
    """Epochs and rounds are whole numbers: no ticks at 1.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def bytes_series(runs: list[RunInfo]) -> tuple[dict[int, list[tuple[int, int]]], list[str]]:
    """(run index → its (step, training bytes) points, names of the runs that moved none:
    noncoop, which a figure leaves out, on a log axis too)."""
    series, silent = {}, []
    for i, run in enumerate(runs):
        key = run.step_key
        pts = [(r[key], step_bytes(run, r)) for r in run.records if isinstance(r.get(key), int)]
        if pts and not any(y for _, y in pts):
            silent.append(run.name)
        elif pts:
            series[i] = pts
    return series, silent


def plot_bytes(runs: list[RunInfo], path: Path) -> Path:
    """Training bytes per epoch/round per run (:func:`step_bytes`: decentralized, sent
    without the evaluation's; server-based, up + down)."""
    return save_figure(bytes_figure(runs), path, dpi=110)


def bytes_figure(runs: list[RunInfo]) -> Any:
    """The figure :func:`plot_bytes` writes."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    handles: list[Any] = []
    labels: list[str] = []
    series, silent = bytes_series(runs)
    colours = run_colours(len(runs))
    for i, pts in series.items():
        xs, ys = zip(*pts, strict=True)
        (line,) = ax.plot(xs, ys, marker=".", color=colours[i])
        handles.append(line)
        labels.append(runs[i].name)
    finals = any(r.get("final") for run in runs for r in run.records)
    ax.set_xlabel(
        "epoch / round" + (" (a final fine-tuning round is drawn after the last)" if finals else "")
    )
    _whole_steps(ax)
    ax.set_ylabel("training bytes per epoch / round")
    if _wide_positive(ax):
        ax.set_yscale("log")
    # "1.20 MB" on the ticks: matplotlib's own labels put a "1e7" above the axis, over
    # the title (none below 0, where the axis's margin may reach)
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda value, _: human_bytes(value) if value >= 0 else "")
    )
    if silent:
        names = ", ".join(silent)
        what = names if len(names) <= 60 else count(len(silent), "run")
        ax.set_title(f"not drawn (no training traffic): {what}", fontsize="small")
    ax.grid(alpha=0.3)
    _legend(fig, handles, labels)
    return fig


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
