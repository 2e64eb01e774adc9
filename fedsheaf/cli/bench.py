"""``fedsheaf bench``: its arguments and entry point (the work is in :mod:`fedsheaf.ops.bench`)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

from fedsheaf.config.sections import load_config
from fedsheaf.ops.bench import document as report
from fedsheaf.ops.bench.driver import (
    _check_tag,
    _device,
    add_pilot_batches,
    collect,
    data_notes,
    default_tag,
    describe,
    read_results,
    run_launch_retrying,
    select,
    skipped,
    source_commit,
)
from fedsheaf.ops.bench.plan import (
    CASE_NAMES,
    DATASETS,
    DEFAULT_CASES,
    FEDREP_DATASET,
    SIZES,
    parse_counts,
    plan,
)
from fedsheaf.ops.processes import raise_on_sigterm
from fedsheaf.util import memory
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import (
    find_mpiexec,
    launcher_template,
)
from fedsheaf.util.log import get_logger

logger = get_logger(__name__)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the performance benchmarks: each case is timed in one or more mpiexec "
        "launches of fedsheaf.ops.bench.worker, whose results are collected into "
        "<out>/<tag>.json and a Markdown summary <out>/<tag>.md that checks the "
        "performance targets. Run it from the repository root. --dry-run lists the "
        "launches without running them; --render rebuilds the Markdown of a results file."
    )
    parser.add_argument(
        "cases",
        nargs="*",
        metavar="CASE",
        help=f"cases to run: {', '.join(CASE_NAMES)} (default: all but placement, N agents "
        "on R ranks, which runs thirteen launches of its own, twenty where gperftools' "
        "tcmalloc is installed)",
    )
    parser.add_argument(
        "--size", default="small", choices=SIZES, help="problem sizes (default: %(default)s)"
    )
    parser.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="(default: %(default)s)"
    )
    parser.add_argument("--ranks", help="weak-scaling rank counts, e.g. 1,2,4,8,16")
    parser.add_argument(
        "--workers",
        help="FedRep worker ranks, e.g. 4,2,1 (dynamic placement; without this option "
        "balanced and static placement on 4 workers run too, for comparison)",
    )
    parser.add_argument(
        "--repeats",
        type=_positive_int,
        help="timed repeats per measurement (default: 5 at --size small, 7 at full)",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        help=f"28×28 image data set of the decentralized cases (default: {DATASETS[0]}, "
        "or the bundled 8×8 digits where it is missing; a data set named here must exist; "
        f"the FedRep case always uses {FEDREP_DATASET})",
    )
    parser.add_argument(
        "--data-root", default="../shared/data", help="its torchvision root (default: %(default)s)"
    )
    parser.add_argument(
        "--out", default="results/bench", help="output folder (default: %(default)s)"
    )
    parser.add_argument("--tag", help="output name (default: <size>-<device>)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every launch, after the plan's own (repeatable), e.g. "
        "sheaf.overlap_exchange=true; a method's own settings (overhead case) still win",
    )
    parser.add_argument(
        "--pilot-batches",
        metavar="KS",
        help="overhead case: also time Sheaf-FRL with these pilot batches K per step, "
        "e.g. 32,16,4 (methods sheaf_frl_K=<K>, rows 1-K=<K>), beside the config's K",
    )
    parser.add_argument(
        "--launcher",
        type=launcher_template,
        help="launch template with {n}, e.g. 'srun -n {n}' (default: mpiexec beside this "
        "Python, with --oversubscribe when ranks exceed physical cores)",
    )
    parser.add_argument(
        "--timeout", type=_positive_seconds, help="seconds per launch (default: 900)"
    )
    parser.add_argument(
        "--only",
        metavar="LABELS",
        help="run only these launches, e.g. table2,pair (labels as --dry-run lists them)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="wall-clock budget for the whole suite: a launch still running when it is "
        "spent is stopped, later ones are skipped, and what finished is written",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="list the launches (ranks, command line, config and overrides) without running them",
    )
    parser.add_argument("--render", metavar="JSON", help="rewrite the Markdown of a results file")


def run(args: argparse.Namespace) -> int:
    if args.tag is not None:
        _check_tag(args.tag)
    if args.render:
        path = Path(args.render)
        _, md = report.write(path.parent, path.stem, read_results(path))
        print(f"fedsheaf bench: wrote {md}")
        return 0
    if not Path("configs").is_dir():
        raise ConfigError("run fedsheaf bench from the repository root (no configs/ here)")
    if args.budget is not None and args.budget <= 0:
        raise ConfigError(f"--budget must be a positive number of seconds, got {args.budget}")
    cases = args.cases or list(DEFAULT_CASES)
    device = _device(args.device)
    dataset = args.dataset or DATASETS[0]
    notes, images, fedrep = data_notes(cases, dataset, args.data_root)
    if args.dataset and not images and set(cases) - {"clients"}:
        from fedsheaf.data.sources import expected_files

        missing = next(
            p
            for split in ("train", "test")
            for p in expected_files(dataset, args.data_root, split)
            if not p.exists()
        )
        raise ConfigError(
            f"--dataset {dataset}: not found under {args.data_root} (no {missing}); give its "
            "torchvision root with --data-root (without --dataset the decentralized cases "
            "fall back to the bundled digits)"
        )
    tcmalloc = None
    if "placement" in cases:
        tcmalloc = memory.find_tcmalloc()
        if tcmalloc is None:
            notes.append(
                "gperftools' tcmalloc is not installed (Debian/Ubuntu: libtcmalloc-minimal4): "
                "the placement case's table2-15-tcmalloc launches are left out"
            )
    launches = plan(
        args.size,
        cases,
        dataset=dataset,
        data_root=args.data_root,
        scaling_ranks=parse_counts(args.ranks, "--ranks") if args.ranks else None,
        workers=parse_counts(args.workers, "--workers") if args.workers else None,
        repeats=args.repeats,
        image_data=images,
        fedrep_data=fedrep,
        tcmalloc=tcmalloc,
    )
    launches = select(launches, args.only)
    for la in launches:
        la.spec["overrides"] = [*la.spec.get("overrides", []), *args.set]
        if args.set:  # a bad key is one message here, not a failed launch
            try:
                load_config(la.spec["config"], la.spec["overrides"])
            except ConfigError as exc:
                raise ConfigError(f"--set, launch {la.label}: {exc}") from None
    if args.pilot_batches is not None:
        notes += add_pilot_batches(launches, parse_counts(args.pilot_batches, "--pilot-batches"))
    tag = args.tag or default_tag(args, device, launches)
    out = Path(args.out)
    for note in notes:
        logger.info(f"fedsheaf bench: note: {note}")
    if args.dry_run:
        if args.launcher is None and find_mpiexec() is None:
            logger.info(
                "fedsheaf bench: note: no mpiexec found here (run run/install.sh, load your "
                "site MPI module, or give --launcher); shown as plain mpiexec"
            )
        for la in launches:  # the launches are the dry run's result: printed whatever -q
            print("\n".join(describe(la, device, args.launcher)))
        if launches:
            print(f"fedsheaf bench: results would go to {out / tag}.json and .md")
        return 0
    if not launches:
        raise ConfigError(f"nothing to run: {'; '.join(notes)}")
    logger.info(f"fedsheaf bench: results go to {out / tag}.json and .md")
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    commit = source_commit(Path(__file__).resolve().parents[2])
    load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    records = []
    deadline = None if args.budget is None else t0 + args.budget
    raise_on_sigterm()  # so that the launch in progress is stopped with the bench
    with tempfile.TemporaryDirectory(prefix="fedsheaf-bench-") as tmp:
        for la in launches:
            if args.timeout is not None:
                la.timeout = args.timeout
            if deadline is not None:
                left = deadline - time.perf_counter()
                if left < 1.0:
                    logger.info(f"fedsheaf bench: {la.label}: skipped, --budget spent")
                    records.append(skipped(la, "--budget spent"))
                    continue
                la.timeout = min(la.timeout, left)
            logger.info(f"fedsheaf bench: {la.label} ({la.ranks} ranks): {', '.join(la.cases)}")
            log = out / "logs" / tag / f"{la.label}.log"
            rec = run_launch_retrying(la, device, args.launcher, log, Path(tmp), deadline)
            code = rec["returncode"]
            status = "ok" if code == 0 else f"exit {code}, see {rec['log']}"
            if code == 124:
                status = f"stopped after {la.timeout:.0f} s (timeout), see {rec['log']}"
            logger.info(f"fedsheaf bench:   {rec['seconds']:.0f} s, {status}")
            records.append(rec)
    results, launch_records = collect(records)
    cut = [r["label"] for r in launch_records if r.get("skipped") or r["returncode"] == 124]
    if cut:
        notes.append(f"stopped or skipped for time (--timeout/--budget): {', '.join(cut)}")
    doc = {
        "meta": {
            "tag": tag,
            "size": args.size,
            "device": device,
            "host": platform.node(),
            "cores": os.cpu_count(),
            "started": started,
            "commit": commit,
            "seconds": time.perf_counter() - t0,
            "load_average_start": load_start,
            "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "command": shlex.join(["fedsheaf", "bench", *sys.argv[2:]]),
            "notes": notes,
        },
        "launches": launch_records,
        "results": results,
    }
    json_path, md_path = report.write(out, tag, doc)
    for row in report.evaluate(doc):  # the summary: the bench's result, printed whatever -q
        print(
            f"  [{row['id']:>8}] {row['where']:<28} {report.fmt(row['value']):>8}  {row['status']}"
        )
    print(f"fedsheaf bench: wrote {json_path} and {md_path}")
    return 0 if all(r["returncode"] == 0 for r in launch_records) else 1
