"""``fedsheaf bench``: run the benchmark launches, collect their results, write the summary.

    fedsheaf bench                              # every case, small size (2 CPU cores, minutes)
    fedsheaf bench overhead bytes               # some cases
    fedsheaf bench --size full --device cuda    # the paper's sizes on one GPU
    fedsheaf bench scaling --size full --device cpu --ranks 1,2,4,8,16
    fedsheaf bench --render results/bench/small-cpu.json   # rebuild the Markdown

Run it from the repository root (the launches name configs/ and graphs/ by relative
path). Each launch is one ``mpiexec`` of :mod:`fedsheaf.ops.bench.worker`; its log goes
to ``<out>/logs/<tag>/<label>.log``. The results land in ``<out>/<tag>.json`` and
``<out>/<tag>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fedsheaf.config.sections import load_config, require_plain_name
from fedsheaf.ops.bench import document as report
from fedsheaf.ops.bench.plan import (
    DEFAULT_CASES,
    FEDREP_DATASET,
    Launch,
    pilot_batch_methods,
)
from fedsheaf.ops.processes import run_job
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import (
    failed_to_start,
    launcher_words,
    local_launcher,
)
from fedsheaf.util.log import get_logger

logger = get_logger(__name__)


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _has_images(dataset: str, root: str) -> bool:
    from fedsheaf.data.sources import expected_files

    return all(p.exists() for s in ("train", "test") for p in expected_files(dataset, root, s))


def _launcher(
    template: str | None, ranks: int, flags: list[str], shown: bool = False
) -> tuple[list[str], dict[str, str]]:
    if template is None:
        cmd, env = local_launcher(ranks, missing_ok=shown)
        cmd = [cmd[0], *flags, *cmd[1:]]
    else:
        cmd, env = launcher_words(template), dict(os.environ)
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


def launch_argv(
    launch: Launch, template: str | None, spec_path: Path, out_path: Path, shown: bool = False
) -> tuple[list[str], dict[str, str]]:
    """The command line of one launch and its environment (``shown``: only to print it)."""
    cmd, env = _launcher(template, launch.ranks, launch.mpi_flags, shown)
    env.update(launch.env)
    worker = [sys.executable, "-m", "fedsheaf.ops.bench.worker", str(spec_path), str(out_path)]
    return [*cmd, *worker], env


def describe(launch: Launch, device: str, template: str | None) -> list[str]:
    """What ``--dry-run`` prints for one launch: a heading, its command line, its spec."""
    argv, _ = launch_argv(
        launch,
        template,
        Path(f"{launch.label}.spec.json"),
        Path(f"{launch.label}.out.json"),
        shown=True,
    )
    env = "".join(f"{k}={shlex.quote(v)} " for k, v in launch.env.items())
    spec = launch.worker_spec(device)
    settings = [spec.get("config", "?"), *spec.get("overrides", [])]
    settings += [
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in spec.items()
        if k not in ("label", "cases", "config", "overrides")
    ]
    return [
        f"{launch.label} ({launch.ranks} rank{'s' if launch.ranks != 1 else ''}): "
        + ", ".join(launch.cases),
        f"    $ {env}{shlex.join(argv)}",
        f"    spec: {' '.join(settings)}",
    ]


def run_launch(
    launch: Launch, device: str, template: str | None, log: Path, tmp: Path
) -> dict[str, Any]:
    """Run one launch; its record (with the worker's JSON under ``output``, if any).

    A launch that outlives ``launch.timeout`` is stopped (SIGTERM, and after 20 s SIGKILL
    for every process left of it, ranks included) and recorded with return code 124.
    """
    spec_path, out_path = tmp / f"{launch.label}.spec.json", tmp / f"{launch.label}.out.json"
    spec_path.write_text(json.dumps(launch.worker_spec(device)))
    argv, env = launch_argv(launch, template, spec_path, out_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as fh:
        fh.write("$ " + shlex.join(argv) + "\n")
        fh.flush()
        code = run_job(argv, fh, env, timeout=launch.timeout, grace=20)
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


def launch_failed_to_start(log: Path, label: str) -> bool:
    """Whether mpiexec failed to start the launch ``label`` (see :func:`failed_to_start`)
    before its worker printed its first line."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return failed_to_start(text, started=f"fedsheaf bench: {label}: ")


def run_launch_retrying(
    launch: Launch,
    device: str,
    template: str | None,
    log: Path,
    tmp: Path,
    deadline: float | None,
) -> dict[str, Any]:
    """:func:`run_launch`, started once more if mpiexec failed to start it (see
    :data:`fedsheaf.util.hostinfo.START_FAILURES`) and ``deadline`` (``time.perf_counter()``)
    leaves time."""
    failed = log.with_name(f"{launch.label}.failed-start.log")
    failed.unlink(missing_ok=True)  # from an earlier run with this tag
    rec = run_launch(launch, device, template, log, tmp)
    time_left = deadline is None or deadline - time.perf_counter() >= 1.0
    if (
        rec["returncode"] in (0, 124)
        or not time_left
        or not launch_failed_to_start(log, launch.label)
    ):
        return rec
    log.replace(failed)
    logger.info(
        f"fedsheaf bench:   exit {rec['returncode']}: mpiexec failed to start the job "
        f"(see {failed}); retrying once"
    )
    if deadline is not None:
        launch.timeout = min(launch.timeout, deadline - time.perf_counter())
    again = run_launch(launch, device, template, log, tmp)
    again["retried_after"] = {"returncode": rec["returncode"], "log": str(failed)}
    again["seconds"] += rec["seconds"]
    return again


def source_commit(checkout: Path) -> str | None:
    """The git commit of the fedsheaf checkout ``checkout`` (``+changes`` where its
    tracked files differ from it), so that numbers can be traced to the code that made
    them; None outside a git checkout (an installed copy) or without git."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head or git("rev-parse", "--show-toplevel") != str(checkout):
        return None
    changed = git("status", "--porcelain", "--untracked-files=no")
    return head + ("+changes" if changed else "")


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
            rec["memory"] = out.get("memory")
            for case, result in out.get("results", {}).items():
                if result is not None:
                    results.setdefault(case, []).append(result)
        launches.append(rec)
    return results, launches


def _results_problem(doc: Any) -> str | None:
    """What keeps ``doc`` from being a results document :mod:`report` can render; None
    when nothing does."""
    if not isinstance(doc, dict):
        return f"it holds a JSON {type(doc).__name__}, not an object"
    missing = [key for key in ("meta", "launches", "results") if key not in doc]
    if missing:
        return f"it lacks {' and '.join(missing)}"
    if not isinstance(doc["meta"], dict):
        return "its meta is not an object"
    launches = doc["launches"]
    if not (isinstance(launches, list) and all(isinstance(la, dict) for la in launches)):
        return "its launches are not a list of objects"
    results = doc["results"]
    if not isinstance(results, dict):
        return "its results are not an object of case: list of results"
    bad = [case for case, found in results.items() if not isinstance(found, list)]
    if bad:
        return f"its {bad[0]} results are not a list"
    # the report reads many fields of each result: render each part alone to name the bad one
    parts: dict[str, dict[str, Any]] = {"meta or launches": {}}
    parts.update({f"{case} results": {case: found} for case, found in results.items()})
    for part, trial in parts.items():
        try:
            report.render_markdown(dict(doc, results=trial))
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
            what = f"lack key {exc}" if isinstance(exc, KeyError) else f"are malformed ({exc})"
            return f"its {part} {what}"
    return None


def read_results(path: str | Path) -> dict[str, Any]:
    """A results file written by ``fedsheaf bench`` (for ``--render``)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--render: results file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--render: cannot read results file {path}: {exc}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"--render: {path} is not valid JSON: {exc}") from None
    problem = _results_problem(doc)
    if problem is not None:
        raise ConfigError(
            f"--render: {path} is not a fedsheaf bench results file: {problem} (expected a "
            "JSON object with meta, launches and results, as fedsheaf bench writes)"
        )
    return doc


def data_notes(cases: list[str], dataset: str, root: str) -> tuple[list[str], bool, bool]:
    """Notes on missing image data for ``cases``; whether the data set and FashionMNIST exist."""
    images = _has_images(dataset, root)
    fedrep = images if dataset == FEDREP_DATASET else _has_images(FEDREP_DATASET, root)
    notes = []
    if not images and set(cases) - {"clients"}:
        notes.append(
            f"{dataset} not found under {root}: the decentralized cases run on the bundled "
            "digits (8×8) instead"
        )
    if not fedrep and "clients" in cases:
        notes.append(
            f"case clients skipped: the FedRep case needs {FEDREP_DATASET}, not found under "
            f"{root} (give its torchvision root with --data-root)"
        )
    return notes, images, fedrep


def add_pilot_batches(launches: list[Launch], ks: list[int]) -> list[str]:
    """Give every overhead launch a Sheaf-FRL method per pilot batch in ``ks`` that it
    does not time already (its config's K, the K of a method it has, e.g. K/8); a note
    for each launch that already times some of them."""
    timed = [la for la in launches if "overhead" in la.cases]
    if not timed:
        raise ConfigError("--pilot-batches needs the overhead case (none of the chosen launches)")
    notes = []
    for la in timed:
        spec = la.spec
        methods = [[], *spec.get("extra_methods", {}).values()]
        have = {
            load_config(spec["config"], [*spec.get("overrides", []), *m]).sheaf.pilot_batch
            for m in methods
        }
        new = [k for k in ks if k not in have]
        if len(new) < len(ks):
            already = ", ".join(str(k) for k in ks if k in have)
            notes.append(f"--pilot-batches: {la.label} times K = {already} already")
        spec["extra_methods"] = {**spec.get("extra_methods", {}), **pilot_batch_methods(new)}
    return notes


def default_tag(args: argparse.Namespace, device: str, launches: list[Launch]) -> str:
    """``<size>-<device>`` for the whole suite as planned; a run of part of it, or with
    settings changed (``--set``, ``--pilot-batches``), gets what it ran after that
    (``small-cpu-overhead+bytes``, ``small-cpu-table2``, ``small-cpu-set``), so that it
    does not replace the whole suite's results."""
    tag = f"{args.size}-{device}"
    if args.only:
        tag += "-" + "+".join(la.label for la in launches)
    elif args.cases and set(args.cases) != set(DEFAULT_CASES):
        tag += "-" + "+".join(dict.fromkeys(args.cases))
    if args.set or args.pilot_batches is not None:
        tag += "-set"
    return tag if len(tag) <= 200 else f"{args.size}-{device}-part"


def _check_tag(tag: str) -> None:
    where = "<out>/<tag>.json, <out>/<tag>.md and <out>/logs/<tag>/"
    require_plain_name(tag, "--tag", where, "use --out to choose the folder", suffix=".json")


