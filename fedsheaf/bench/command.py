"""``fedsheaf bench``: run the benchmark launches, collect their results, write the summary.

    fedsheaf bench                              # every case, small size (2 CPU cores, minutes)
    fedsheaf bench overhead bytes               # some cases
    fedsheaf bench --size full --device cuda    # the paper's sizes on one GPU
    fedsheaf bench scaling --size full --device cpu --ranks 1,2,4,8,16
    fedsheaf bench --render results/bench/small-cpu.json   # rebuild the Markdown

Run it from the repository root (the launches name configs/ and graphs/ by relative
path). Each launch is one ``mpiexec`` of :mod:`fedsheaf.bench.worker`; its log goes
to ``<out>/logs/<tag>/<label>.log``. The results land in ``<out>/<tag>.json`` and
``<out>/<tag>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fedsheaf.bench import report
from fedsheaf.bench.plan import CASE_NAMES, SIZES, Launch, parse_counts, plan
from fedsheaf.errors import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cases",
        nargs="*",
        metavar="CASE",
        help=f"cases to run (default: all): {', '.join(CASE_NAMES)}",
    )
    parser.add_argument("--size", default="small", choices=SIZES, help="problem sizes")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--ranks", help="weak-scaling rank counts, e.g. 1,2,4,8,16")
    parser.add_argument(
        "--workers",
        help="FedRep worker ranks, e.g. 4,2,1 (dynamic placement; without this option "
        "balanced and static placement on 4 workers run too, for comparison)",
    )
    parser.add_argument("--repeats", type=int, help="timed repeats per measurement")
    parser.add_argument("--dataset", default="fashionmnist", help="image data set (28×28)")
    parser.add_argument("--data-root", default="../shared/data", help="its torchvision root")
    parser.add_argument("--out", default="results/bench", help="output folder")
    parser.add_argument("--tag", help="output name (default: <size>-<device>)")
    parser.add_argument(
        "--launcher",
        help="launch template with {n}, e.g. 'srun -n {n}' (default: mpiexec beside this "
        "Python, with --oversubscribe when ranks exceed physical cores)",
    )
    parser.add_argument("--timeout", type=float, help="seconds per launch (default 900)")
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
    parser.add_argument("--dry-run", action="store_true", help="print the launches only")
    parser.add_argument("--render", metavar="JSON", help="rewrite the Markdown of a results file")


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _has_images(dataset: str, root: str) -> bool:
    from fedsheaf.data.sources import expected_files

    return all(p.exists() for p in expected_files(dataset, root))


def _launcher(
    template: str | None, ranks: int, flags: list[str]
) -> tuple[list[str], dict[str, str]]:
    if template is None:
        from fedsheaf.hostinfo import local_launcher

        cmd, env = local_launcher(ranks)
        cmd = [cmd[0], *flags, *cmd[1:]]
    else:
        cmd, env = shlex.split(template), dict(os.environ)
    return [c.replace("{n}", str(ranks)) for c in cmd], env


def select(launches: list[Launch], only: str | None) -> list[Launch]:
    """The launches named in ``only`` (comma-separated labels), in plan order."""
    if not only:
        return launches
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    unknown = sorted(wanted - {la.label for la in launches})
    if unknown:
        known = ", ".join(la.label for la in launches) or "none"
        raise ConfigError(f"--only: no launch {unknown} for these cases and size; planned: {known}")
    return [la for la in launches if la.label in wanted]


def run_launch(
    launch: Launch, device: str, template: str | None, log: Path, tmp: Path
) -> dict[str, Any]:
    """Run one launch; its record (with the worker's JSON under ``output``, if any).

    A launch that outlives ``launch.timeout`` is stopped (its whole process group) and
    recorded with return code 124.
    """
    spec_path, out_path = tmp / f"{launch.label}.spec.json", tmp / f"{launch.label}.out.json"
    spec_path.write_text(json.dumps(launch.worker_spec(device)))
    cmd, env = _launcher(template, launch.ranks, launch.mpi_flags)
    env.update(launch.env)
    argv = [*cmd, sys.executable, "-m", "fedsheaf.bench.worker", str(spec_path), str(out_path)]
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as fh:
        fh.write("$ " + shlex.join(argv) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=launch.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the launcher and its ranks only
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = 124
    record: dict[str, Any] = {
        "label": launch.label,
        "ranks": launch.ranks,
        "cases": launch.cases,
        "seconds": time.perf_counter() - start,
        "returncode": code,
        "log": str(log),
    }
    if code == 0 and out_path.exists():
        record["output"] = json.loads(out_path.read_text())
    return record


def skipped(launch: Launch, why: str) -> dict[str, Any]:
    """The record of a launch that did not run."""
    return {
        "label": launch.label,
        "ranks": launch.ranks,
        "cases": launch.cases,
        "seconds": 0.0,
        "returncode": None,
        "skipped": why,
    }


def collect(records: list[dict[str, Any]]) -> tuple[dict[str, list], list[dict[str, Any]]]:
    """Results by case, and the launch records without the bulky worker output."""
    results: dict[str, list] = {}
    launches = []
    for rec in records:
        out = rec.pop("output", None)
        if out is not None:
            rec["environment"] = out.get("environment")
            for case, result in out.get("results", {}).items():
                if result is not None:
                    results.setdefault(case, []).append(result)
        launches.append(rec)
    return results, launches


def run(args: argparse.Namespace) -> int:
    if args.render:
        doc = json.loads(Path(args.render).read_text())
        path = Path(args.render)
        _, md = report.write(path.parent, path.stem, doc)
        print(f"fedsheaf bench: wrote {md}")
        return 0
    if not Path("configs").is_dir():
        raise ConfigError("run fedsheaf bench from the repository root (no configs/ here)")
    if args.budget is not None and args.budget <= 0:
        raise ConfigError(f"--budget must be a positive number of seconds, got {args.budget}")
    cases = args.cases or list(CASE_NAMES)
    device = _device(args.device)
    notes = []
    images = _has_images(args.dataset, args.data_root)
    if not images:
        notes.append(
            f"{args.dataset} not found under {args.data_root}: decentralized cases ran on the "
            "bundled digits and the FedRep case was skipped"
        )
    launches = plan(
        args.size,
        cases,
        dataset=args.dataset,
        data_root=args.data_root,
        scaling_ranks=parse_counts(args.ranks, "--ranks") if args.ranks else None,
        workers=parse_counts(args.workers, "--workers") if args.workers else None,
        repeats=args.repeats,
        image_data=images,
    )
    launches = select(launches, args.only)
    tag = args.tag or f"{args.size}-{device}"
    if args.dry_run:
        for la in launches:
            print(f"{la.label}: {la.ranks} ranks, {', '.join(la.cases)}: {la.worker_spec(device)}")
        return 0
    out = Path(args.out)
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    records = []
    deadline = None if args.budget is None else t0 + args.budget
    with tempfile.TemporaryDirectory(prefix="fedsheaf-bench-") as tmp:
        for la in launches:
            if args.timeout:
                la.timeout = args.timeout
            if deadline is not None:
                left = deadline - time.perf_counter()
                if left < 1.0:
                    print(f"fedsheaf bench: {la.label}: skipped, --budget spent", flush=True)
                    records.append(skipped(la, "--budget spent"))
                    continue
                la.timeout = min(la.timeout, left)
            print(
                f"fedsheaf bench: {la.label} ({la.ranks} ranks): {', '.join(la.cases)}", flush=True
            )
            rec = run_launch(
                la, device, args.launcher, out / "logs" / tag / f"{la.label}.log", Path(tmp)
            )
            code = rec["returncode"]
            status = "ok" if code == 0 else f"exit {code}, see {rec['log']}"
            if code == 124:
                status = f"stopped after {la.timeout:.0f} s (timeout), see {rec['log']}"
            print(f"fedsheaf bench:   {rec['seconds']:.0f} s, {status}", flush=True)
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
    for row in report.evaluate(doc):
        print(
            f"  [{row['id']:>8}] {row['where']:<28} {report.fmt(row['value']):>8}  {row['status']}"
        )
    print(f"fedsheaf bench: wrote {json_path} and {md_path}")
    return 0 if all(r["returncode"] == 0 for r in launch_records) else 1
