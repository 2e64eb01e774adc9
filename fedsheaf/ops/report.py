"""``fedsheaf report``: run directories → comparison table (Markdown + CSV) and figures.

Every directory holding a ``summary.json`` and a ``config.yaml`` (written by
:class:`~fedsheaf.rundir.files.RunDir`) below the given paths is one run. Runs are grouped
by *method* and *setting* (shift s and, when all agents share one, latent size d).
Within a group, λ (or whatever the study grid-searched; ``sheaf.lam`` by default) is
chosen by the mean **validation** score ``score_val`` over seeds — the harmonic mean
of validation private and communication accuracy — never by test numbers. The table
reports the chosen grid point's **test** accuracies as mean ± std over seeds; where
a study grid-searched, ``grid.md``/``.csv`` list every grid point the same way.

``fedsheaf report`` also writes a per-run table and learning-curve / bytes figures
for any mix of run directories, both families, and the server-based runs' means over
seeds per setting (:mod:`fedsheaf.ops.report_runs`).

Method names and grid keys come from the sweep's ``study.json`` when there is one;
otherwise the method is the algorithm (plus a non-default Sheaf-FRL variant, pilot
strategy or Parseval flag) and the grid key is ``sheaf.lam`` (none for noncoop).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsheaf.config.sections import flat_keys, read_yaml
from fedsheaf.ops.report_runs import csv_cell, readable, seed_independent
from fedsheaf.rundir.files import outermost_runs, read_json_object
from fedsheaf.util.atomic import atomic_write_text, save_figure
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import get_logger

logger = get_logger(__name__)

METRICS = ("private_acc", "comm_acc", "comm_acc_deg")
LAMBDA_FREE = ("noncoop",)
METRIC_TITLES = {
    "private_acc": "private acc.",
    "comm_acc": "comm. acc.",
    "comm_acc_deg": "comm. acc. (deg.-weighted)",
}


@dataclass
class RunRecord:
    """What the report needs from one run directory."""

    path: Path
    method: str
    shift: float
    dim: int | None
    hyper: tuple[tuple[str, Any], ...]
    seed: int
    summary: dict[str, Any]
    #: the run's resolved config, flattened to dotted keys
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def setting(self) -> tuple[float, int | None]:
        return (self.shift, self.dim)


@dataclass
class Row:
    """One line of the comparison table: a method at a setting, best grid point."""

    method: str
    shift: float
    dim: int | None
    hyper: tuple[tuple[str, Any], ...]
    seeds: int
    score_val: float
    mean: dict[str, float]
    std: dict[str, float]
    candidates: int


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def default_method(cfg: dict[str, Any]) -> str:
    """Method label from a resolved config."""
    name = str(cfg.get("algorithm"))
    sheaf = cfg.get("sheaf") or {}
    if name == "sheaf_frl":
        if sheaf.get("variant", "standard") != "standard":
            name += f"/{sheaf['variant']}"
        if sheaf.get("pilot_strategy", "uniform") != "uniform":
            name += f"/{sheaf['pilot_strategy']}"
        if sheaf.get("parseval"):
            name += "+parseval"
    return name


def _manifest_entry(run: Any) -> bool:
    return (
        isinstance(run, dict)
        and isinstance(run.get("dir"), str)
        and isinstance(run.get("method"), str)
        and isinstance(run.get("grid") or {}, dict)
    )


def _manifests(paths: list[Path]) -> dict[Path, tuple[dict[str, Any], list[str]]]:
    """Run directory → (manifest entry, grid keys) from every study.json at or above paths."""
    found: dict[Path, tuple[dict[str, Any], list[str]]] = {}
    seen: set[Path] = set()
    for p in paths:
        for cand in [p, *p.parents, *p.rglob("study.json")]:
            f = cand if cand.name == "study.json" else cand / "study.json"
            if f in seen or not f.is_file():
                continue
            seen.add(f)
            data = read_json_object(f)
            runs, keys = data.get("runs", []), data.get("grid_keys", [])
            if not (
                isinstance(runs, list)
                and all(_manifest_entry(r) for r in runs)
                and isinstance(keys, list)
            ):
                raise ConfigError(
                    f"{f} is not a sweep manifest (fedsheaf sweep writes one: a 'runs' list "
                    "of entries with a 'dir', a 'method' and a 'grid', and a 'grid_keys' list)"
                )
            for run in runs:  # sweep layout: <sweep dir>/runs/<run name>
                where = (f.parent / "runs" / Path(run["dir"]).name).resolve()
                found[where] = (run, list(keys))
    return found


def _hashable(value: Any) -> Any:
    """A grid value as a key: lists (e.g. a grid over widths) as tuples."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def collect(paths: Sequence[str | Path]) -> list[RunRecord]:
    """Every finished run (summary.json + config.yaml) at or below ``paths``."""
    roots = [Path(p) for p in paths]
    for r in roots:
        if not r.exists():
            raise ConfigError(f"no such run or study directory: {r}")
    manifests = _manifests(roots)
    found = {s.parent.resolve() for r in roots for s in r.rglob("summary.json")}
    records: list[RunRecord] = []
    datasets: set[str] = set()
    runs = outermost_runs({d for d in found if (d / "config.yaml").is_file()})

    def read(d: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        return (
            d,
            read_yaml(d / "config.yaml", what="run config"),
            read_json_object(d / "summary.json"),
        )

    for d, cfg, summary in readable(runs, read):
        datasets.add(str(_get(cfg, "data.dataset")))
        entry, _ = manifests.get(d, (None, []))
        method = entry["method"] if entry else default_method(cfg)
        if entry is not None:  # the sweep's own grid for this method (maybe none)
            keys = list(entry.get("grid") or {})
        else:  # λ, except for the one method without a cooperation term
            keys = [] if cfg.get("algorithm") in LAMBDA_FREE else ["sheaf.lam"]
        agents = cfg.get("agents") or []
        # (d of the cnn; a plug-in model's is not in its config: unknown, like unequal ones)
        dims = {int(a["encoder"][-1]) if a.get("encoder") else None for a in agents}
        records.append(
            RunRecord(
                d,
                method,
                float(_get(cfg, "data.shift")),
                dims.pop() if len(dims) == 1 else None,
                tuple((k, _hashable(_get(cfg, k))) for k in keys),
                int(cfg.get("seed", 0)),
                summary,
                flat_keys(cfg),
            )
        )
    if not records:
        where = ", ".join(map(str, paths))
        raise ConfigError(f"no finished runs (summary.json + config.yaml) under {where}")
    warn_repeated_seeds(records)
    warn_mixed_experiments(records)
    if len(datasets) > 1:
        logger.warning(
            f"report: warning: the runs use {len(datasets)} datasets "
            f"({', '.join(sorted(datasets))}); "
            "the comparison averages a method's runs across them: report each dataset's runs "
            "on their own"
        )
    return records


def warn_repeated_seeds(records: list[RunRecord]) -> None:
    """Say where two runs share method, setting, hyper-parameters *and* seed: the table
    averages them as if they were different seeds (a run repeated under another name,
    or with another length)."""
    same: dict[tuple[Any, ...], list[RunRecord]] = {}
    for r in records:
        same.setdefault((r.method, r.setting, r.hyper, r.seed), []).append(r)
    for (method, _, _, seed), group in same.items():
        if len(group) > 1:
            names = ", ".join(str(r.path) for r in group)
            logger.warning(
                f"report: warning: {len(group)} {method} runs with the same setting and seed "
                f"{seed} are averaged as if they were different seeds: {names}"
            )


def warn_mixed_experiments(records: list[RunRecord]) -> None:
    """Say where runs averaged as the seeds of one setting (same method, setting and
    grid point) differ in anything but the seed and where their files go: the table
    would present two experiments (other epochs, learning rate, models) as one."""
    groups: dict[tuple[Any, ...], list[RunRecord]] = {}
    for r in records:
        groups.setdefault((r.method, r.setting, r.hyper), []).append(r)
    for (method, _, _), group in groups.items():
        # keys every run's config.yaml has (one written before a key existed lacks it)
        keys = sorted(set.intersection(*(set(r.config) for r in group)))
        differ = [
            k
            for k in keys
            if not seed_independent(k) and len({repr(r.config.get(k)) for r in group}) > 1
        ]
        if not differ:
            continue
        shown = "; ".join(
            f"{k} ({' vs '.join(sorted({repr(r.config.get(k)) for r in group}))})"
            for k in differ[:4]
        ) + ("; ..." if len(differ) > 4 else "")
        names = ", ".join(str(r.path) for r in group)
        logger.warning(
            f"report: warning: {len(group)} {method} runs averaged as seeds of one setting "
            f"differ in {shown}: {names}"
        )


def warn_unfinished(paths: list[str | Path], finished: set[Path]) -> set[Path]:
    """Say which runs a sweep planned (study.json) at or below ``paths`` are not among the
    ``finished`` run directories: a failed or unfinished run would otherwise just be
    missing from its method's mean. Returns them."""
    under = [Path(p).resolve() for p in paths]
    planned = [d for d in _manifests(under) if any(d == r or r in d.parents for r in under)]
    missing = sorted(d for d in planned if d not in finished)
    if missing:
        shown = ", ".join(d.name for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
        logger.warning(
            f"report: warning: {len(missing)} of the {len(planned)} runs the sweep planned "
            f"(study.json) have no readable summary.json (failed, unfinished or not run) and "
            f"are left out: {shown}"
        )
    return set(missing)


def note_unfinished(unfinished: list[Path], said: set[Path]) -> None:
    """Say which run directories found have no summary.json (running, stopped, failed or
    interrupted), beyond those :func:`warn_unfinished` named already: the runs table
    lists them with their status, but the means and the comparison leave them out."""
    left = [d for d in unfinished if d.resolve() not in said]
    if left:
        shown = ", ".join(d.name for d in left[:5]) + (", ..." if len(left) > 5 else "")
        logger.warning(  # (a note, said with the warnings on standard error)
            f"report: note: {len(left)} of the runs found have no summary.json yet "
            "(running, stopped, failed or interrupted: their status is in the runs table) "
            f"and are left out of the means and the comparison: {shown}"
        )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _mean(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.fmean(vals) if vals else float("nan")


def _std(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.stdev(vals) if len(vals) > 1 else float("nan")


Grid = dict[tuple[tuple[str, Any], ...], list[RunRecord]]


def _groups(records: list[RunRecord]) -> dict[tuple[str, float, int | None], Grid]:
    """Method × setting → grid point → its runs (one per seed)."""
    groups: dict[tuple[str, float, int | None], Grid] = {}
    for r in records:
        groups.setdefault((r.method, r.shift, r.dim), {}).setdefault(r.hyper, []).append(r)
    return groups


def _val_score(runs: list[RunRecord]) -> float:
    s = _mean([_num(r.summary.get("score_val")) for r in runs])
    return -math.inf if math.isnan(s) else s


def _best(cands: Grid) -> tuple[tuple[str, Any], ...]:
    return max(sorted(cands, key=repr), key=lambda hyper: _val_score(cands[hyper]))


def _point(key: tuple[str, float, int | None], hyper: Any, runs: list[RunRecord], n: int) -> Row:
    mean = {m: _mean([_num(r.summary.get(m)) for r in runs]) for m in METRICS}
    std = {m: _std([_num(r.summary.get(m)) for r in runs]) for m in METRICS}
    return Row(*key, hyper, len(runs), _val_score(runs), mean, std, n)


def _order(r: Row) -> tuple[Any, ...]:
    return (r.method, r.dim if r.dim is not None else -1, r.shift)


def select(records: list[RunRecord]) -> list[Row]:
    """Per method × setting: the grid point with the best mean validation score."""
    return [row for row, chosen in grid_points(records) if chosen]


def _value_order(v: Any) -> tuple[Any, ...]:
    if isinstance(v, int | float):
        return (0, v)
    if isinstance(v, tuple):
        return (1, tuple(_value_order(x) for x in v))
    return (2, repr(v))


def _hyper_order(hyper: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
    """Grid points in order of their values, numbers as numbers (K = 4 before 16)."""
    return tuple((k, _value_order(v)) for k, v in hyper)


def grid_points(records: list[RunRecord]) -> list[tuple[Row, bool]]:
    """Every grid point of every method × setting, and whether it is the selected one."""
    points = []
    for key, cands in _groups(records).items():
        best = _best(cands)
        for hyper, runs in cands.items():
            points.append((_point(key, hyper, runs, len(cands)), hyper == best))
    points.sort(key=lambda p: (_order(p[0]), _hyper_order(p[0].hyper)))
    return points


def _pm(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def _shown(value: Any) -> str:
    """A grid value as a config spells it (a tuple from :func:`_hashable` as a list)."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def _hyper(hyper: tuple[tuple[str, Any], ...], none: str = "–") -> str:
    if not hyper:
        return none
    return ", ".join(
        f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else f"{k}={_shown(v)}"
        for k, v in hyper
    )


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def _md_cells(r: Row, point: str, score: str) -> list[str]:
    """One table row: the setting, ``point`` (the grid point), seeds, ``score``, metrics."""
    dim = "het." if r.dim is None else str(r.dim)
    metrics = [_pm(r.mean[m], r.std[m]) for m in METRICS]
    return [r.method, f"{r.shift:g}", dim, point, str(r.seeds), score, *metrics]


def markdown(rows: list[Row]) -> str:
    head = ["method", "s", "d", "selected", "seeds", "val. score", *METRIC_TITLES.values()]
    return _md_table(
        head,
        [
            _md_cells(
                r,
                _hyper(r.hyper) + (f" (of {r.candidates})" if r.hyper else ""),
                f"{r.score_val:.3f}",
            )
            for r in rows
        ],
    )


def grid_markdown(points: list[tuple[Row, bool]]) -> str:
    head = ["method", "s", "d", "grid point", "seeds", "val. score", *METRIC_TITLES.values()]
    return _md_table(
        [*head, "selected"],
        [
            [
                *_md_cells(
                    r, _hyper(r.hyper), "–" if math.isinf(r.score_val) else f"{r.score_val:.3f}"
                ),
                "✓" if chosen else "",
            ]
            for r, chosen in points
        ],
    )


def _cells(values: list[Any]) -> list[Any]:
    return [csv_cell(v) for v in values]


def grid_csv(points: list[tuple[Row, bool]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        ["method", "shift", "dim", "grid", "seeds", "score_val"]
        + [f"{m}_{s}" for m in METRICS for s in ("mean", "std")]
        + ["selected"]
    )
    for r, chosen in points:
        w.writerow(
            _cells(
                [r.method, r.shift, r.dim, _hyper(r.hyper, none=""), r.seeds, r.score_val]
                + [x for m in METRICS for x in (r.mean[m], r.std[m])]
                + [int(chosen)]
            )
        )
    return buf.getvalue()


def table_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        ["method", "shift", "dim", "selected", "seeds", "candidates", "score_val"]
        + [f"{m}_{s}" for m in METRICS for s in ("mean", "std")]
    )
    for r in rows:
        w.writerow(
            _cells(
                [
                    r.method,
                    r.shift,
                    r.dim,
                    _hyper(r.hyper, none=""),
                    r.seeds,
                    r.candidates,
                    r.score_val,
                ]
                + [x for m in METRICS for x in (r.mean[m], r.std[m])]
            )
        )
    return buf.getvalue()


def runs_csv(records: list[RunRecord]) -> str:
    """Every run with its validation and test numbers (the raw material of the table)."""
    cols = ["score_val", "private_acc_val", "comm_acc_val", *METRICS, "wall_seconds"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["run", "method", "shift", "dim", "grid", "seed", *cols])
    for r in sorted(records, key=lambda r: (r.method, r.shift, r.dim or 0, repr(r.hyper), r.seed)):
        w.writerow(
            _cells(
                [r.path.name, r.method, r.shift, r.dim, _hyper(r.hyper, none=""), r.seed]
                + [r.summary.get(c) for c in cols]
            )
        )
    return buf.getvalue()


def plot(rows: list[Row], axis: str, path: Path) -> Path:
    """Private and communication accuracy against ``axis`` ('shift' or 'dim'), per method."""
    return save_figure(accuracy_figure(rows, axis), path, dpi=120)


def accuracy_figure(rows: list[Row], axis: str) -> Any:
    """The figure :func:`plot` writes: one line per method, mean ± std over seeds, the
    settings run as the x ticks, the methods named right of the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comm = "comm_acc_deg" if axis == "shift" else "comm_acc"
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4), layout="constrained")
    values = sorted({getattr(r, axis) for r in rows if getattr(r, axis) is not None})
    handles, labels = [], []
    for ax, metric in zip(axes, ("private_acc", comm), strict=True):
        for method in sorted({r.method for r in rows}):
            pts = sorted(
                (getattr(r, axis), r.mean[metric], r.std[metric], r.seeds)
                for r in rows
                if r.method == method and getattr(r, axis) is not None
            )
            if not pts:
                continue
            xs, ys, es, seeds = zip(*pts, strict=True)
            errs = [0.0 if math.isnan(e) else e for e in es]
            line = ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3)
            if metric == "private_acc":
                handles.append(line)
                n = sorted(set(seeds))
                labels.append(f"{method} ({'/'.join(map(str, n))} seed{'s' * (n != [1])})")
        ax.set_xlabel("shift strength s" if axis == "shift" else "bottleneck dimension d")
        if axis == "dim":
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        ax.set_xticks(values, [f"{v:g}" for v in values])  # the settings that were run
        ax.set_ylabel(METRIC_TITLES[metric])
        ax.grid(alpha=0.3)
    if all(r.seeds == 1 for r in rows):
        fig.suptitle("one seed per point: no error bars", fontsize="small")
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    return fig


def write_report(records: list[RunRecord], out: Path) -> list[Path]:
    """Write comparison.md/.csv, runs.csv, grid.md/.csv where a grid was searched, and
    the figures the settings call for."""
    points = grid_points(records)
    rows = [row for row, chosen in points if chosen]  # = select(records)
    written = []
    intro = (
        "Selected grid point per method and setting by mean validation score "
        "(harmonic mean of validation private and communication accuracy); test "
        "accuracies as mean ± std over seeds.\n\n"
    )
    texts = [
        ("comparison.md", "# Comparison\n\n" + intro + markdown(rows)),
        ("comparison.csv", table_csv(rows)),
        ("runs.csv", runs_csv(records)),
    ]
    if any(r.candidates > 1 for r in rows):  # a grid was searched: show all of it
        grid_intro = (
            "Every grid point per method and setting: mean validation score and test "
            "accuracies as mean ± std over seeds; ✓ marks the one `comparison.md` "
            "selected.\n\n"
        )
        texts += [
            ("grid.md", "# Grid\n\n" + grid_intro + grid_markdown(points)),
            ("grid.csv", grid_csv(points)),
        ]
    else:
        for name in ("grid.md", "grid.csv"):  # not a stale one from an earlier report
            (out / name).unlink(missing_ok=True)
    for name, text in texts:
        atomic_write_text(out / name, text)
        written.append(out / name)
    if len({r.shift for r in rows}) > 1:
        written.append(plot(rows, "shift", out / "accuracy_vs_shift.png"))
    if len({r.dim for r in rows if r.dim is not None}) > 1:
        written.append(plot(rows, "dim", out / "accuracy_vs_bottleneck.png"))
    return written


