"""Run directories: resolved config, per-round metrics, summary — written atomically.

Layout of a run directory::

    config.yaml        the resolved config (after overrides)
    graph.yaml         decentralized runs: a copy of the graph file (checked on resume)
    metrics.jsonl      one JSON object per epoch/round (appended, flushed, fsynced)
    summary.json       final numbers, written once at the end
    summary.prev.json  while a finished run is trained longer: its earlier summary
    checkpoints/       see fedsheaf.rundir.checkpoint
    tb/                TensorBoard event files (output.tensorboard=true; rundir.tensorboard)
    .fedsheaf.lock     held by the job writing into it (fedsheaf.rundir.run_lock)
    .fedsheaf-run.json fedsheaf's mark: {"format", "created", "fedsheaf"}, written first

fedsheaf writes only into a directory that is new, empty or its own (:func:`owned`), and
``output.overwrite`` deletes only the files it writes: whatever else is there stays.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import uuid
from pathlib import Path
from typing import Any

from fedsheaf import __version__
from fedsheaf.config.sections import ExperimentConfig, is_algorithm_ref, read_yaml
from fedsheaf.rundir import run_lock
from fedsheaf.util.atomic import atomic_write_json, atomic_write_text, json_safe
from fedsheaf.util.errors import ConfigError, WriteError
from fedsheaf.util.log import get_logger

logger = get_logger(__name__)

#: What a rank writes into its run directory when an error ends the job
#: (:mod:`fedsheaf.runtime.world`'s abort hook): ``{"rank", "error", "time"}``.
FAILURE_FILE = "failed.json"

#: What rank 0 writes into its run directory when the run stops on request
#: (:mod:`fedsheaf.runtime.stop_request`): ``{"signal", "epoch" or "round", "time"}``.
STOP_FILE = "stopped.json"

#: Where ``output.tensorboard=true`` writes TensorBoard event files, in the run directory.
TENSORBOARD_DIR = "tb"

#: The names of TensorBoard's event files (what ``output.overwrite`` removes from ``tb/``).
EVENT_FILES = "events.out.tfevents.*"

#: What a run leaves beside its config.yaml (one is enough to make it a run directory).
RUN_MARKS = ("metrics.jsonl", "summary.json", "checkpoints", FAILURE_FILE, STOP_FILE)


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a fedsheaf run: its config.yaml beside one of
    :data:`RUN_MARKS` (a run that failed or stopped before its first epoch has only its
    note)."""
    return (path / "config.yaml").is_file() and any((path / m).exists() for m in RUN_MARKS)


def outermost_runs(dirs: set[Path]) -> list[Path]:
    """The run directories ``dirs`` (resolved), sorted, without any that lies inside another
    of them (written there by mistake before ``fedsheaf run`` refused it); each one left
    out is said on stdout."""
    kept = []
    for d in sorted(dirs):
        outer = next((a for a in d.parents if a in dirs), None)
        if outer is None:
            kept.append(d)
        else:
            logger.info(f"report: skipping {d}: it lies inside the run directory {outer}")
    return kept


#: fedsheaf's mark on a run directory: ``{"format", "created", "fedsheaf"}``, written
#: atomically by the job's root before anything else in a new run directory
#: (:func:`mark`); a directory holding it is a fedsheaf run's.
MARKER = ".fedsheaf-run.json"

#: The run-directory format :data:`MARKER` names; a greater one is a newer fedsheaf's.
MARKER_FORMAT = 1


def _marker_format(path: Path) -> int | None:
    """The format :data:`MARKER` in ``path`` names (None: none, or one that cannot be
    read, which :func:`mark` replaces)."""
    try:
        note = read_json_object(path / MARKER)
    except (ConfigError, OSError):
        return None
    found = note.get("format")
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def is_fedsheaf_config(path: Path) -> bool:
    """Whether ``path`` reads as a fedsheaf config (a run's config.yaml, however old; not
    another tool's): a YAML mapping with a ``name``, whose top-level keys are all
    fedsheaf's, naming one of its algorithms or an algorithm plug-in if any."""
    try:
        raw = read_yaml(path)
    except ConfigError:
        return False
    known = {f.name for f in dataclasses.fields(ExperimentConfig)}
    return (
        "name" in raw and set(raw) <= known and is_algorithm_ref(raw.get("algorithm", "sheaf_frl"))
    )


def owned(path: Path) -> bool:
    """Whether the existing directory ``path`` is a fedsheaf run's: it holds
    :data:`MARKER`; or, written before fedsheaf marked its run directories, the run's
    lock file (:data:`fedsheaf.rundir.run_lock.LOCK_FILE`), or a fedsheaf config.yaml
    beside one of :data:`RUN_MARKS`."""
    if _marker_format(path) is not None or (path / run_lock.LOCK_FILE).exists():
        return True
    return is_run_dir(path) and is_fedsheaf_config(path / "config.yaml")


def mark(path: Path) -> None:
    """Write :data:`MARKER` into run directory ``path`` unless a readable one is there (a
    new run directory, or one an earlier fedsheaf wrote, now resumed or replaced)."""
    if _marker_format(path) is None:
        note = {"format": MARKER_FORMAT, "created": _now(), "fedsheaf": __version__}
        atomic_write_json(path / MARKER, note)


def check_not_foreign(path: str | Path) -> None:
    """Refuse a run directory inside another run's, one that a newer fedsheaf wrote, or
    one that exists, holds files and is not a fedsheaf run's (:func:`owned`): a run would
    replace its files or mix its results in, and ``output.overwrite`` delete some. The
    refusal names what the directory holds."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run directory {path} is a file; choose another output.name")
    outer = next((a for a in path.absolute().parents if is_run_dir(a)), None)
    if outer is not None:
        raise ConfigError(
            f"run directory {path} would lie inside the run directory {outer}; "
            "choose an output.dir outside it"
        )
    if not path.is_dir():
        return
    found = _marker_format(path)
    if found is not None and found > MARKER_FORMAT:
        raise ConfigError(
            f"run directory {path} was written by a newer fedsheaf (run-directory format "
            f"{found}, this one reads {MARKER_FORMAT}); use that version, or choose another "
            "output.name or output.dir"
        )
    held = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    if not held or owned(path):
        return
    shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
    why = ""
    if (path / "config.yaml").is_file():
        why = (
            "; its config.yaml is a fedsheaf config but no run's files are beside it"
            if is_fedsheaf_config(path / "config.yaml")
            else "; its config.yaml is not a fedsheaf config"
        )
    raise ConfigError(
        f"run directory {path} exists and is not a fedsheaf run (it holds {shown}{why}); "
        "choose another output.name or output.dir"
    )


#: A finished run's summary while the run is trained longer (``fedsheaf run --resume``
#: with a greater length); removed once the new summary is written.
PREVIOUS_SUMMARY = "summary.prev.json"

#: The files a run directory holds (checkpoints and the graph copy aside).
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json", PREVIOUS_SUMMARY)


def check_run_files(path: Path) -> None:
    """Refuse a run directory where one of :data:`RUN_FILES` is not a file (a directory)."""
    for name in RUN_FILES:
        if (path / name).exists() and not (path / name).is_file():
            raise ConfigError(
                f"{path / name} is not a file (a run writes its {name} there); "
                "remove it or choose another output.name or output.dir"
            )


def refuse_finished(path: Path, overwrite: bool, extend: bool) -> None:
    """Refuse to write into a finished run's directory unless told to replace or extend it."""
    if (path / "summary.json").exists() and not (overwrite or extend):
        raise ConfigError(
            f"run directory {path} already holds a finished run; choose "
            "another output.name or pass output.overwrite=true"
        )


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_failure(path: Path, rank: int, error: str, since: float | None = None) -> bool:
    """Best effort, never raising: say in run directory ``path`` why its job ended (only
    where this rank sees that directory: nothing is created). Returns whether this rank
    is the one to say it: with ``since`` (when this process started, ``time.time()``), a
    ``failed.json`` written since then by another rank of the job is kept (ranks that
    fail together, e.g. all diverging at one step, report once); an older one, from an
    earlier launch, is replaced. Without ``since``, every rank reports; where nothing can
    be written (a full disk), the first rank to lock the run's ``config.yaml`` does
    (:func:`fedsheaf.rundir.run_lock.first_to_lock`)."""
    if not path.is_dir():
        return True
    target = path / FAILURE_FILE
    note = {"rank": rank, "error": error, "time": _now()}
    try:
        if since is None:
            atomic_write_json(target, note)
            return True
        tmp = path / f".{FAILURE_FILE}.{uuid.uuid4().hex}.tmp"
        atomic_write_json(tmp, note)
        try:
            os.link(tmp, target)  # atomic, and only where no failed.json exists
            return True
        except FileExistsError:
            if os.path.samefile(tmp, target):
                return True  # NFS may say EEXIST for a link it made
            if target.stat().st_mtime >= since:
                return False  # another rank of this job said it first
            os.replace(tmp, target)
            return True
        except OSError:  # a file system without hard links: no election, every rank says it
            os.replace(tmp, target)
            return True
        finally:
            tmp.unlink(missing_ok=True)
    except Exception:  # the job is ending on another error already
        if since is None:
            return True
        try:  # another rank's failed.json fitted where this rank's copy does not
            if target.stat().st_mtime >= since:
                return False
        except OSError:
            pass
        return run_lock.first_to_lock(path / "config.yaml")


def read_failure(path: Path) -> dict[str, Any] | None:
    """What :func:`write_failure` left in ``path`` (None: nothing)."""
    if not (path / FAILURE_FILE).is_file():
        return None
    try:
        return read_json_object(path / FAILURE_FILE)
    except (ConfigError, OSError):
        return {"error": f"{FAILURE_FILE} cannot be read"}


def write_stop(path: Path, signal_name: str, unit: str, done: int) -> None:
    """Say in run directory ``path`` that its run stopped on ``signal_name`` after
    ``unit`` ``done``, its checkpoint written (a resume removes it)."""
    atomic_write_json(path / STOP_FILE, {"signal": signal_name, unit: done, "time": _now()})


def read_stop(path: Path) -> str | None:
    """What :func:`write_stop` left in ``path``, in words (None: nothing)."""
    if not (path / STOP_FILE).is_file():
        return None
    try:
        note = read_json_object(path / STOP_FILE)
    except (ConfigError, OSError):
        return f"stopped ({STOP_FILE} cannot be read)"
    unit = "round" if "round" in note else "epoch"
    return f"stopped on {note.get('signal')} after {unit} {note.get(unit)}"


def read_only(path: Path) -> bool:
    """Whether the existing ``path`` lies on a file system mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def unwritable(path: Path, where: Path, rofs: bool, resuming: bool) -> ConfigError:
    """The refusal of run directory ``path`` that cannot be written: ``where`` (``path``
    or the ancestor it would be made in) is on a read-only file system (``rofs``) or not
    writable. A new run may go elsewhere (another ``output.dir``); a run being resumed
    stays where it is, so the way out is to make it writable or resume a copy."""
    place = "it" if where == path else str(where)
    why = f"{place} is on a read-only file system" if rofs else f"{place} is not writable"
    if resuming and path.is_dir():
        fix = "remount it read-write" if rofs else "make it writable"
        how = f"{fix}, or copy the run directory to a writable place and resume the copy"
    else:
        how = "choose another output.dir"
    return ConfigError(f"cannot write into run directory {path}: {why}; {how}")


class RunDir:
    """The directory one run writes into (only rank 0 creates one)."""

    def __init__(
        self, path: str | Path, overwrite: bool = False, extend: bool = False, lock: bool = False
    ) -> None:
        """``extend``: a finished run to be trained longer (its summary stays until
        :func:`fedsheaf.rundir.lifecycle.settle_config` sets it aside); ``lock``: take the
        run directory's lock (:func:`fedsheaf.rundir.run_lock.hold`) before anything in it changes
        (the job's one checking rank does; a hub run's agents' root writes under its
        server's lock)."""
        self.path = Path(path)
        check_run_files(self.path)
        refuse_finished(self.path, overwrite, extend)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create run directory {self.path}: {exc.strerror or exc}"
                "; choose another output.dir"
            ) from None
        probe = self.path / f".probe.{os.getpid()}.{uuid.uuid4().hex}"
        try:  # a read-only directory (or file system) is a user error, found before training
            probe.touch(exist_ok=False)
            probe.unlink()
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                rofs = exc.errno == errno.EROFS
                raise unwritable(self.path, self.path, rofs, resuming=extend) from None
            raise ConfigError(
                f"cannot write into run directory {self.path}: {exc.strerror or exc}"
                "; choose another output.dir"
            ) from None
        mark(self.path)  # (before the lock, in a new directory)
        if lock:
            run_lock.hold(self.path)
        if overwrite:
            for name in (
                "metrics.jsonl",
                "summary.json",
                PREVIOUS_SUMMARY,
                FAILURE_FILE,
                STOP_FILE,
            ):
                try:
                    (self.path / name).unlink(missing_ok=True)
                except OSError as exc:
                    raise ConfigError(
                        f"cannot remove {self.path / name} (output.overwrite=true): "
                        f"{exc.strerror or exc}"
                    ) from None
            board = self.path / TENSORBOARD_DIR
            for events in sorted(board.glob(EVENT_FILES)) if board.is_dir() else []:
                try:  # the replaced run's TensorBoard events (its other files there stay)
                    events.unlink()
                except OSError as exc:
                    raise ConfigError(
                        f"cannot remove {events} (output.overwrite=true): {exc.strerror or exc}"
                    ) from None

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def write_config(self, text: str) -> None:
        atomic_write_text(self.path / "config.yaml", text)

    def append_metrics(self, record: dict[str, Any]) -> None:
        line = (json.dumps(json_safe(record)) + "\n").encode()
        try:
            fd = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise WriteError(self.metrics_path, exc) from exc
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            try:
                done = 0
                while done < len(line):
                    done += os.write(fd, line[done:])
                os.fsync(fd)
            except OSError as exc:  # a full disk: no line cut short is left behind
                try:
                    os.ftruncate(fd, end)
                except OSError:
                    pass
                raise WriteError(self.metrics_path, exc) from exc
        finally:
            os.close(fd)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / "summary.json", summary)
        (self.path / PREVIOUS_SUMMARY).unlink(missing_ok=True)  # a shorter run's, now replaced


def read_json_object(path: str | Path) -> dict[str, Any]:
    """A JSON file holding one object (a summary, a manifest); ConfigError otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data


def read_metrics(path: str | Path, damaged: list[int] | None = None) -> list[dict[str, Any]]:
    """All complete records of a metrics.jsonl file (a torn last line, or a line that is
    not a JSON object, is skipped). ``damaged`` gets the numbers (from 1) of the skipped
    lines that end in a newline: damaged, not still being written."""
    records = []
    with open(path, errors="replace") as fh:  # a damaged line then fails as JSON
        for number, line in enumerate(fh, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            elif damaged is not None and line.endswith("\n") and line.strip():
                damaged.append(number)
    return records
