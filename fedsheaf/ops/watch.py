"""``fedsheaf watch RUN_DIR``: follow a running job through its ``metrics.jsonl``.

Prints a one-line header from ``config.yaml``, then one line per epoch (decentralized)
or round (server-based) as rank 0 appends them, and a closing line once
``summary.json`` appears (or ``failed.json``, left by a rank whose error ended the job:
exit status 1; or ``stopped.json``, left by a run stopped on request with its checkpoint:
exit status 3). Only complete lines are read: a line still being written
(a torn tail) is picked up on the next poll.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from fedsheaf.config.sections import SERVER_BASED, read_yaml
from fedsheaf.rundir import run_lock
from fedsheaf.rundir.files import FAILURE_FILE, STOP_FILE, read_failure, read_json_object, read_stop
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.units import count, decimals, human_bytes

#: ``watch``'s exit status for a run stopped on request (SIGUSR1), to be resumed.
STOPPED = 3

#: The longest ``--interval`` (s): a day; ``time.sleep`` overflows far beyond it.
MAX_INTERVAL = 86400.0


class MetricsTail:
    """Complete JSON records appended to a file since the last :meth:`poll`.

    A file that is replaced (a resumed run rewrites ``metrics.jsonl`` up to its
    checkpoint; ``output.overwrite`` starts it afresh) is read again from its start, and
    :attr:`restarted` says so until the next poll. Complete lines that are not a JSON
    object are skipped; :attr:`entries` holds each line of the last poll in order, as
    ``(line number from 1, its record or None for a damaged line)``.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines = path, 0, 0
        self.inode: int | None = None
        self.restarted = False
        self.entries: list[tuple[int, dict[str, Any] | None]] = []

    def poll(self) -> list[dict[str, Any]]:
        self.restarted, self.entries = False, []
        try:
            fh = open(self.path, "rb")
        except (FileNotFoundError, IsADirectoryError):
            return []
        with fh:
            stat = os.fstat(fh.fileno())
            if stat.st_ino != self.inode or stat.st_size < self.offset:
                self.restarted = self.inode is not None
                self.inode, self.offset, self.lines = stat.st_ino, 0, 0
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # the bytes after the last newline are not yet a line
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            self.lines += 1
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                rec = None
            if isinstance(rec, dict):
                records.append(rec)
                self.entries.append((self.lines, rec))
            elif line.strip():
                self.entries.append((self.lines, None))
        return records


def _version(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from the next (writers replace it whole)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _minutes(minutes: float) -> str:
    return f"{minutes * 60:.0f} s" if minutes < 1 else f"{minutes:.0f} min"


def _family(cfg: dict[str, Any]) -> str:
    return "server" if cfg.get("algorithm") in SERVER_BASED else "decentralized"


def _total(cfg: dict[str, Any]) -> Any:
    if _family(cfg) == "server":
        return (cfg.get("federated") or {}).get("rounds")
    return (cfg.get("train") or {}).get("epochs")


def _counted(n: Any, unit: str) -> str:
    """``count(n, unit)`` for a number, else ``"n units"`` (a config value read as is)."""
    return count(n, unit) if isinstance(n, int) else f"{n} {unit}s"


def header(cfg: dict[str, Any], run_dir: Path) -> str:
    """``name · algorithm · seed · participants · length · directory``."""
    fed = cfg.get("federated") or {}
    if _family(cfg) == "server":
        who, length = _counted(fed.get("clients"), "client"), _counted(_total(cfg), "round")
    else:
        agents = cfg.get("agents") or []
        who = count(len(agents), "agent") if agents else f"graph {cfg.get('graph')}"
        length = _counted(_total(cfg), "epoch")
    parts = [str(cfg.get("name")), str(cfg.get("algorithm")), f"seed {cfg.get('seed')}"]
    return " · ".join([*parts, who, length, str(run_dir)])


def format_record(rec: dict[str, Any], cfg: dict[str, Any]) -> str | None:
    """One progress line for an epoch/round record (None for records of neither kind)."""
    total = _total(cfg)
    if "round" in rec:
        step = "final" if rec.get("final") else f"round {rec['round']}/{total}"
    elif "epoch" in rec:
        step = f"epoch {rec['epoch']}/{total}"
    else:
        return None
    cells = [f"{step:<12}"]
    if rec.get("loss") is not None:
        cells.append(f"loss {decimals(rec['loss'], 4)}")
    for key, label in (
        ("private_acc", "private"),
        ("comm_acc", "comm"),
        ("score_val", "val score"),
        ("acc", "acc"),
        ("test_mse", "test_mse"),
        ("gram_err_star", "gram_err"),
    ):
        if rec.get(key) is not None:
            value = rec[key]
            text = f"{value:.3g}" if key == "gram_err_star" else decimals(value)
            cells.append(f"{label} {text}")
    if rec.get("seconds") is not None:
        cells.append(f"{rec['seconds']:.2f} s")
    # in the units of the job's own progress lines
    if "bytes_sent" in rec:
        sent = f"sent {human_bytes(rec['bytes_sent'], compact=True)}"
        if "eval_bytes_sent" in rec:  # an evaluated epoch: its own traffic apart
            sent += f" training + {human_bytes(rec['eval_bytes_sent'], compact=True)} evaluation"
        cells.append(sent)
    if "server_bytes_sent" in rec:
        up, down = (
            human_bytes(rec["server_bytes_sent"], compact=True),
            human_bytes(rec.get("server_bytes_received"), compact=True),
        )
        cells.append(f"server up {up} down {down}")
    if "bytes_up" in rec:
        up, down = (
            human_bytes(rec["bytes_up"], compact=True),
            human_bytes(rec.get("bytes_down"), compact=True),
        )
        cells.append(f"up {up} down {down}")
    return "  ".join(cells)


def finished_line(summary: dict[str, Any]) -> str:
    """Closing line from summary.json."""
    cells = [f"finished in {decimals(summary.get('wall_seconds'), 1)} s:"]
    for key, label in (
        ("private_acc", "private"),
        ("comm_acc", "comm"),
        ("comm_acc_deg", "comm (deg.)"),
        ("acc_last", "acc"),
        ("final_acc", "final acc"),
        ("score", "score"),
    ):
        if summary.get(key) is not None:
            cells.append(f"{label} {decimals(summary[key], 4)}")
    if summary.get("score_is"):
        cells.append(f"({summary['score_is']})")
    peak = (summary.get("memory") or {}).get("peak_rss_bytes_max")
    if peak is not None:
        cells.append(f"· peak memory {human_bytes(peak)} a rank")
    return " ".join(cells)


def _quiet_minutes(run_dir: Path, since_lock: bool = True) -> float:
    """Minutes since the run last wrote a record (or its config, before the first) or,
    with ``since_lock``, a job took it up (a resume writes the lock as it takes it)."""
    times = []
    for name in ("metrics.jsonl", "config.yaml"):
        try:
            times.append((run_dir / name).stat().st_mtime)
            break
        except OSError:
            continue
    if since_lock:
        try:
            times.append((run_dir / run_lock.LOCK_FILE).stat().st_mtime)
        except OSError:
            pass
    return (time.time() - max(times)) / 60 if times else 0.0


def _since_last(run_dir: Path) -> str:
    """``", last record 12 min ago"`` once that is over a minute (a stalled or dead job
    looks like this; a job that is alive writes a record every epoch or round)."""
    if not (run_dir / "metrics.jsonl").is_file():
        return ""
    age = _quiet_minutes(run_dir, since_lock=False)
    if age < 1:
        return ""
    return (
        f", last record {age:.0f} min ago" if age < 120 else f", last record {age / 60:.0f} h ago"
    )


def _check_span(value: float, option: str, unit: str, most: float = math.inf) -> None:
    """Refuse ``value`` unless it is finite, positive and at most ``most`` (nan too)."""
    if not (0 < value <= most and math.isfinite(value)):
        limit = f" up to {most:g}" if math.isfinite(most) else ""
        raise ConfigError(
            f"{option} must be a finite positive number of {unit}{limit}, got {value}"
        )


def _read_config(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    return read_yaml(path)


def watch(
    run_dir: str | Path,
    interval: float = 5.0,
    once: bool = False,
    out: TextIO | None = None,
    stall: float = 30.0,
    until_finished: bool = False,
) -> int:
    """Print progress of the run in ``run_dir``; return when it has finished (0), when it
    has failed (1: its job ended on an error, which the run's ``failed.json`` names), when
    it has stopped on request (:data:`STOPPED`: ``stopped.json``), or at once.

    ``once`` prints everything recorded so far plus a status line, then returns. While
    following, a run that has written no record for ``stall`` minutes gets one line
    asking whether the job still runs (a job killed outright leaves no summary and no
    ``failed.json``), and so does a run directory (or config) still absent after ``stall``
    minutes (a job refused at start-up, a bad config say, writes nothing there).
    ``until_finished`` follows a stopped run on through its resume (a job requeued at
    its time limit) until it finishes or fails.
    """
    out = out if out is not None else sys.stdout
    run_dir = Path(run_dir)
    _check_span(interval, "--interval", "seconds", MAX_INTERVAL)
    _check_span(stall, "--stall", "minutes")
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a run directory (a file)")
    if not run_dir.exists():
        if once:
            raise ConfigError(f"no such run directory: {run_dir}")
        print(f"waiting for {run_dir} (the job creates it when it starts)", file=out, flush=True)
    cfg = _read_config(run_dir)
    if cfg is None and once:
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    if cfg is None and run_dir.is_dir():
        print(
            f"waiting for {run_dir / 'config.yaml'} (the job writes it before its first "
            "epoch or round)",
            file=out,
            flush=True,
        )
    waiting_since, asked = time.monotonic(), False
    while cfg is None:  # the job has not started, or not written its config yet
        failure = read_failure(run_dir)
        if failure is not None:  # it ended before its first epoch
            print(_failed_line(failure), file=out, flush=True)
            return 1
        waited = (time.monotonic() - waiting_since) / 60
        if waited >= stall and not asked:  # a job refused at start-up writes nothing here
            print(
                f"no run started in {_minutes(waited)}: is its job still queued, or did it "
                "end before it started (see the job's output)? (still watching)",
                file=out,
                flush=True,
            )
            asked = True
        time.sleep(interval)
        cfg = _read_config(run_dir)
    print(header(cfg, run_dir), file=out, flush=True)
    tail, seen, warned = MetricsTail(run_dir / "metrics.jsonl"), 0, False
    config_stamp = _version(run_dir / "config.yaml")
    job_seen = False  # whether a job has been seen holding the run's lock
    free_since: float | None = None  # since when no job has held it
    stopped = False  # (until_finished) waiting for a stopped run's resume
    while True:
        # first: a job found gone here has written all it ever will before the reads below
        held = run_lock.probe(run_dir)
        # checked first: no record comes after either
        done = (run_dir / "summary.json").is_file()
        # an earlier launch's ending, which a resume holding the lock has yet to clear
        stale = bool(held) and _older_than_lock(run_dir, FAILURE_FILE, STOP_FILE)
        failure = None if done or stale else read_failure(run_dir)
        stop = None if done or failure or stale else read_stop(run_dir)
        tail.poll()
        if tail.restarted:
            print(
                "metrics.jsonl was rewritten (the run was resumed from a checkpoint or "
                "started again): its records from the start",
                file=out,
                flush=True,
            )
            seen = 0
        stamp = _version(run_dir / "config.yaml")
        if stamp != config_stamp:  # a resume that changed its length (or an overwrite)
            config_stamp, new = stamp, _read_config(run_dir)
            if new is not None and header(new, run_dir) != header(cfg, run_dir):
                cfg = new
                print(header(cfg, run_dir), file=out, flush=True)
        for number, rec in tail.entries:
            if rec is None:
                print(f"metrics.jsonl line {number} is damaged: skipped", file=out, flush=True)
                continue
            line = format_record(rec, cfg)
            if line is not None:
                seen += 1
                print(line, file=out, flush=True)
        if done:
            summary = read_json_object(run_dir / "summary.json")
            print(finished_line(summary), file=out, flush=True)
            return 0
        if failure is not None:  # the job ended on an error: nothing more will come
            print(_failed_line(failure), file=out, flush=True)
            return 1
        if stop is not None:  # nothing more until it is resumed (a requeued job, by hand)
            resume = f"fedsheaf run --resume {run_dir}"
            if once or not until_finished:
                print(
                    f"{stop}, its checkpoint written; a requeued job continues it, or: {resume}",
                    file=out,
                    flush=True,
                )
                return STOPPED
            if not stopped:
                print(
                    f"{stop}, its checkpoint written; waiting for a requeued job (or: "
                    f"{resume}) to continue it",
                    file=out,
                    flush=True,
                )
            stopped = True
            time.sleep(interval)
            continue
        if stopped:
            print("resumed", file=out, flush=True)
            stopped = False
        unit = "round" if _family(cfg) == "server" else "epoch"
        state = f"{count(seen, unit)} so far" if seen else f"no {unit}s recorded yet"
        free_since = (free_since or time.monotonic()) if held is False else None
        # (None: cannot tell, keep watching; a rank may still be writing failed.json)
        if free_since is not None and (once or job_seen and time.monotonic() - free_since > 2):
            print(_ended_line(run_dir, state, job_seen), file=out, flush=True)
            return 1
        job_seen = job_seen or bool(held)
        if once:
            print(f"running: {state}{_since_last(run_dir)}", file=out, flush=True)
            return 0
        quiet = _quiet_minutes(run_dir)
        if quiet >= stall and not warned:
            print(
                f"no new record for {_minutes(quiet)}: is the job still running? (still watching)",
                file=out,
                flush=True,
            )
        warned = quiet >= stall
        time.sleep(interval)


def _older_than_lock(run_dir: Path, *names: str) -> bool:
    """Whether the files ``names`` that exist in ``run_dir`` are all older than its lock
    file, which the job holding it wrote as it took it."""
    try:
        locked = (run_dir / run_lock.LOCK_FILE).stat().st_mtime
    except OSError:
        return False
    times = []
    for name in names:
        try:
            times.append((run_dir / name).stat().st_mtime)
        except OSError:
            continue
    return bool(times) and max(times) < locked


def _ended_line(run_dir: Path, state: str, seen_running: bool) -> str:
    """What to say of a run that no job holds (:func:`fedsheaf.rundir.run_lock.probe`) and that
    left no summary, failed.json or stopped.json."""
    how = (
        "its job has ended without a word (killed outright: SIGKILL, out of memory, a lost node?)"
        if seen_running
        else "no job runs it (its job ended without a word, or has not started yet)"
    )
    return f"not running: {state}; {how}; to continue it: fedsheaf run --resume {run_dir}"


def _failed_line(failure: dict[str, Any]) -> str:
    where = f" on rank {failure['rank']}" if "rank" in failure else ""
    return f"failed{where}: {failure.get('error')}"


