"""``fedsheaf report``: its arguments and entry point (the work: :mod:`fedsheaf.ops.report`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fedsheaf.ops.report import (
    collect,
    markdown,
    note_unfinished,
    select,
    warn_unfinished,
    write_report,
)
from fedsheaf.rundir.files import is_run_dir
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.log import get_logger
from fedsheaf.util.units import count

logger = get_logger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Turn run directories (of either family, or folders holding them) into a per-run "
        "table (runs_table.md/.csv), learning curves and bytes-per-round figures; for "
        "server-based runs also their means over seeds per setting (server_means.md/.csv); "
        "for decentralized runs also the study comparison (λ picked per method and setting "
        "by validation score) and accuracy vs s / vs d figures."
    )
    parser.add_argument("paths", nargs="+", help="run directories or folders holding them")
    parser.add_argument(
        "--out",
        help="output directory (default: report in the folder holding the PATHS, e.g. "
        "runs/report for runs/a runs/b or for runs/study15; never inside a run directory)",
    )


def default_out(paths: list[str]) -> Path:
    """Where ``fedsheaf report PATHS`` writes without ``--out``: a folder ``report`` in the
    common parent folder of ``paths`` (beside them, not inside one), or beside the outermost
    run directory holding that folder; relative to the working directory where it lies
    below it."""
    parents = [Path(os.path.abspath(p)).parent for p in paths]
    base = Path(os.path.commonpath(parents))
    holding = [d for d in (base, *base.parents) if is_run_dir(d)]
    if holding:
        base = holding[-1].parent
    out = base / "report"
    try:
        return out.relative_to(Path.cwd())
    except ValueError:
        return out


def run(args: argparse.Namespace) -> int:
    from fedsheaf.ops.report_runs import (
        find_runs,
        runs_table_markdown,
        server_means_markdown,
        server_seed_groups,
        server_seed_means,
        write_runs_report,
    )

    runs = find_runs(args.paths)
    out = Path(args.out) if args.out else default_out(args.paths)
    if is_run_dir(out):  # its files beside a run's own, where report would find them
        raise ConfigError(
            f"--out {out} is a run directory; give the report a folder of its own (without "
            "--out, report beside the PATHS)"
        )
    said = warn_unfinished(args.paths, {r.path.resolve() for r in runs if r.summary is not None})
    note_unfinished([r.path for r in runs if r.summary is None], said)
    means = server_seed_means(server_seed_groups(runs))
    written = write_runs_report(runs, out, means)
    study = [r.path for r in runs if r.family == "decentralized" and r.summary is not None]
    records = collect(study) if study else []
    if records:
        written += write_report(records, out)
    for path in written:
        print(path)
    logger.info(f"report: wrote {count(len(written), 'file')} to {out}")
    print(runs_table_markdown(runs), end="")
    if means:
        print("\n" + server_means_markdown(means), end="")
    if records:
        print("\n## Comparison\n\n" + markdown(select(records)), end="")
    return 0
