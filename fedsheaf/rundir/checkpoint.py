"""Checkpoints of runs of every family: one state file per rank, one manifest per run.

Layout inside a run directory::

    checkpoints/
      epoch-0004/rank-0.pt … rank-{N-1}.pt
      epoch-0005/rank-0.pt … rank-{N-1}.pt
      latest.json      {"epoch": 5, "n_ranks": N, "epochs": [4, 5]}

Protocol (driven by :mod:`fedsheaf.rundir.lifecycle`): after an epoch every rank
writes its own file with :func:`save_rank` (atomically: temp file + rename);
after a barrier, rank 0 calls :func:`commit`, which atomically rewrites the
manifest to include the new epoch and deletes checkpoints beyond the ``keep``
newest. A checkpoint exists for a reader only once the manifest names it, so a
job killed at any moment leaves the previous complete checkpoint usable.
:func:`latest` returns the newest listed checkpoint whose rank files are all on
disk. Nothing here knows about MPI.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedsheaf.util.atomic import atomic_write_json, atomic_write_text, json_safe, write_atomic
from fedsheaf.util.errors import CheckpointError

FORMAT = 1
MANIFEST = "latest.json"


class WallClock:
    """A run's wall time across its launches.

    The state that the rank writing the run's records checkpoints (agent 0, or the
    server of a server-based run) carries :meth:`total` as ``wall_seconds``; a launch
    that resumes from it continues the count (:meth:`resumed`), so that a summary's
    ``wall_seconds`` is the time of every launch up to the checkpoint the next one
    continued from, plus the last launch (work lost after a checkpoint is not counted).
    A checkpoint from before this count existed contributes nothing.
    """

    KEY = "wall_seconds"

    def __init__(self) -> None:
        self.before = 0.0
        self.start = time.perf_counter()
        self.end: float | None = None

    def resumed(self, state: dict[str, Any] | None) -> None:
        """Continue the count of the run whose checkpoint (this rank's) is ``state``."""
        self.before = float((state or {}).get(self.KEY, 0.0))

    def stop(self) -> float:
        """Stop the clock (what the summary and the closing line then say); the total."""
        self.end = time.perf_counter()
        return self.total()

    def this_launch(self) -> float:
        return (self.end if self.end is not None else time.perf_counter()) - self.start

    def total(self) -> float:
        return self.before + self.this_launch()

    def describe(self) -> str:
        """``12.3s`` or, after a resume, ``12.3s in all, 4.1s in this launch``."""
        if not self.before:
            return f"{self.total():.1f}s"
        return f"{self.total():.1f}s in all, {self.this_launch():.1f}s in this launch"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: the state of every rank at the end of ``epoch``."""

    run_dir: Path
    epoch: int
    n_ranks: int

    @property
    def path(self) -> Path:
        return epoch_dir(self.run_dir, self.epoch)

    def rank_file(self, rank: int) -> Path:
        return rank_file(self.run_dir, self.epoch, rank)


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def epoch_dir(run_dir: str | Path, epoch: int) -> Path:
    return checkpoints_dir(run_dir) / f"epoch-{epoch:04d}"


def rank_file(run_dir: str | Path, epoch: int, rank: int) -> Path:
    return epoch_dir(run_dir, epoch) / f"rank-{rank}.pt"


def due(epochs_done: int, every: int, last: int | None = None) -> bool:
    """Whether a checkpoint is written after ``epochs_done`` epochs: every ``every`` and
    after the ``last`` (so that a finished run can be extended from its end), never when
    ``every=0``."""
    return every > 0 and (epochs_done % every == 0 or epochs_done == last)


# ---- writing ---------------------------------------------------------------
def save_rank(run_dir: str | Path, epoch: int, rank: int, state: dict[str, Any]) -> Path:
    """Atomically write one rank's state for ``epoch``; returns the file."""
    payload = {"format": FORMAT, "epoch": epoch, "rank": rank, **state}
    return write_atomic(rank_file(run_dir, epoch, rank), lambda fh: torch.save(payload, fh))


#: What to do about a damaged manifest, which no resume can do without.
_LOST = (
    " (it names the complete checkpoints and what they were trained on: restore it from a "
    "backup, or start the run over with output.overwrite=true)"
)


def _read_manifest(run_dir: str | Path) -> dict[str, Any] | None:
    path = checkpoints_dir(run_dir) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint manifest {path} is unreadable: {exc}{_LOST}") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("n_ranks"), int)
        or not isinstance(data.get("epochs"), list)
        or not all(isinstance(e, int) for e in data["epochs"])
    ):
        raise CheckpointError(f"checkpoint manifest {path} is malformed{_LOST}")
    return data


def manifest_ranks(run_dir: str | Path) -> int | None:
    """How many ranks wrote the checkpoints of ``run_dir`` (None: it holds none)."""
    manifest = _read_manifest(run_dir)
    return None if manifest is None else int(manifest["n_ranks"])


def commit(
    run_dir: str | Path,
    epoch: int,
    n_ranks: int,
    keep: int = 2,
    experiment: dict[str, Any] | None = None,
    data: str | None = None,
) -> Checkpoint:
    """Record ``epoch`` as complete (call once every rank has saved) and prune old ones.

    The manifest is replaced atomically, then checkpoint folders that are neither
    among the ``keep`` newest listed epochs nor newer than ``epoch`` are deleted.
    ``experiment``: the settings the checkpoints were written under
    (:func:`fedsheaf.rundir.resume.experiment_keys`), for :func:`recorded_experiment`; ``data``:
    the data set's fingerprint (:func:`fedsheaf.data.sources.data_digest`), for
    :func:`recorded_data`.
    """
    manifest = _read_manifest(run_dir)
    previous = manifest["epochs"] if manifest else []
    epochs = sorted({e for e in previous if e < epoch} | {epoch})[-keep:]
    record: dict[str, Any] = {
        "format": FORMAT,
        "epoch": epoch,
        "n_ranks": n_ranks,
        "epochs": epochs,
    }
    if experiment is not None:
        record["experiment"] = experiment
    if data is not None:
        record["data"] = data
    atomic_write_json(checkpoints_dir(run_dir) / MANIFEST, record)
    for folder in checkpoints_dir(run_dir).glob("epoch-*"):
        number = _epoch_of(folder)
        if number is not None and number not in epochs and number <= epoch:
            shutil.rmtree(folder, ignore_errors=True)
    return Checkpoint(Path(run_dir), epoch, n_ranks)


def _recorded(run_dir: str | Path, key: str, kind: type) -> Any:
    """The manifest's ``key`` if it is a ``kind`` (None: not recorded, as in checkpoints
    from before fedsheaf recorded it)."""
    manifest = _read_manifest(run_dir)
    found = manifest.get(key) if manifest else None
    return found if isinstance(found, kind) else None


def recorded_experiment(run_dir: str | Path) -> dict[str, Any] | None:
    """The settings the newest checkpoints were written under (None: none recorded)."""
    return _recorded(run_dir, "experiment", dict)


def recorded_data(run_dir: str | Path) -> str | None:
    """The fingerprint of the data set the newest checkpoints were trained on (None: not
    recorded, as by server-based runs)."""
    return _recorded(run_dir, "data", str)


def forget_after(run_dir: str | Path, epoch: int) -> None:
    """Drop from the manifest the epochs after ``epoch``, the checkpoint a resume has just
    read on every rank: those could not be used (damaged or incomplete), and the resumed
    launch writes its own. Else its first commit would count them among the ``keep``
    newest and could prune a good checkpoint while keeping a damaged one."""
    manifest = _read_manifest(run_dir)
    if manifest is None or all(e <= epoch for e in manifest["epochs"]):
        return
    manifest["epochs"] = [e for e in manifest["epochs"] if e <= epoch]
    manifest["epoch"] = epoch
    atomic_write_json(checkpoints_dir(run_dir) / MANIFEST, manifest)


def _epoch_of(folder: Path) -> int | None:
    tail = folder.name.removeprefix("epoch-")
    return int(tail) if tail.isdigit() else None


# ---- reading ---------------------------------------------------------------
def complete(run_dir: str | Path, n_ranks: int) -> list[Checkpoint]:
    """The complete checkpoints of a run directory, newest first.

    Complete means: listed in the manifest and every rank file present. A
    manifest written by a job with another rank count is an error.
    """
    manifest = _read_manifest(run_dir)
    if manifest is None:
        return []
    if manifest["n_ranks"] != n_ranks:
        raise CheckpointError(
            f"cannot resume {run_dir}: its checkpoints hold {manifest['n_ranks']} ranks "
            f"but this job has {n_ranks}"
        )
    found = []
    for epoch in sorted(manifest["epochs"], reverse=True):
        ckpt = Checkpoint(Path(run_dir), epoch, n_ranks)
        if all(ckpt.rank_file(r).is_file() for r in range(n_ranks)):
            found.append(ckpt)
    return found


def latest(run_dir: str | Path, n_ranks: int) -> Checkpoint | None:
    """The newest complete checkpoint of a run directory, or None if there is none."""
    found = complete(run_dir, n_ranks)
    return found[0] if found else None


def none_readable(run_dir: str | Path, problem: str) -> CheckpointError:
    """The refusal of a resume whose every complete checkpoint has a file that cannot be
    read (``problem``: the newest one's reason)."""
    return CheckpointError(
        f"cannot resume {run_dir}: no checkpoint can be read ({problem}); "
        "start over with output.overwrite=true"
    )


def _torch_reason(exc: Exception) -> str:
    """The first line of what torch said, without its advice to load the file unsafely."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if "weights only load failed" in first.lower():
        first = "it holds objects other than tensors and plain values"
    first = first if len(first) <= 100 else first[:97] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def load_rank(ckpt: Checkpoint, rank: int) -> dict[str, Any]:
    """One rank's saved state (tensors on CPU)."""
    path = ckpt.rank_file(rank)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise CheckpointError(f"checkpoint file {path} cannot be read: {exc}") from None
    except Exception as exc:  # torch raises many types, with long advice, for a damaged file
        raise CheckpointError(
            f"checkpoint file {path} cannot be read: it is damaged or truncated, or not a "
            f"checkpoint fedsheaf wrote ({_torch_reason(exc)})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint file {path} is not a fedsheaf checkpoint")
    if state.get("epoch") != ckpt.epoch or state.get("rank") != rank:
        raise CheckpointError(
            f"checkpoint file {path} does not hold rank {rank}, epoch {ckpt.epoch}"
        )
    return state


# ---- run-directory housekeeping ----------------------------------------------
def refuse_unfinished(run_dir: str | Path) -> None:
    """Before a run starts from epoch 0 in ``run_dir`` (without ``output.overwrite``):
    an unfinished run's metrics or checkpoints there are an error that says how to
    resume instead (a finished run is results.RunDir's to report)."""
    run_dir = Path(run_dir)
    if (run_dir / "summary.json").exists():
        return
    if (run_dir / "metrics.jsonl").exists() or checkpoints_dir(run_dir).exists():
        raise CheckpointError(
            f"run directory {run_dir} holds an unfinished run; continue it with "
            f"'fedsheaf run --resume {run_dir}' (or checkpoint.resume=true), or start "
            "over with output.overwrite=true"
        )


def delete_checkpoints(run_dir: str | Path) -> None:
    """Before a run starts over in ``run_dir`` (``output.overwrite``): its earlier
    checkpoints go (results.RunDir deletes the metrics)."""
    shutil.rmtree(checkpoints_dir(run_dir), ignore_errors=True)


def rewrite_metrics(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Replace metrics.jsonl by ``records`` (one JSON line each), atomically.

    On resume this drops the lines of epochs after the checkpoint, which the
    resumed run writes again.
    """
    atomic_write_text(path, "".join(json.dumps(json_safe(r)) + "\n" for r in records))


def cut_back(run_dir: str | Path, epoch: int | None, records: list[dict[str, Any]]) -> None:
    """What a resume from the checkpoint after ``epoch`` (None: from the start) does to the
    run directory once every rank has read it: metrics.jsonl holds ``records`` (those up
    to it) and the manifest forgets the later checkpoints (:func:`forget_after`)."""
    rewrite_metrics(Path(run_dir) / "metrics.jsonl", records)
    if epoch is not None:
        forget_after(run_dir, epoch)


def unevaluated(records: list[dict[str, Any]], wanted: range, counter: str, key: str) -> list[int]:
    """The epochs (rounds) in ``wanted`` that ``records`` hold without an evaluation.

    ``counter`` names the records' epoch (round) field and ``key`` a field that only
    evaluated records have; a final fine-tuning record is not a round. Epochs that
    ``records`` do not reach are not listed: a resumed run trains and evaluates them.
    A run resumed with a shorter length than it began with can end where its
    checkpoints were not evaluated; this says where.
    """
    evaluated = {r[counter]: key in r for r in records if not r.get("final")}
    return [t for t in wanted if t in evaluated and not evaluated[t]]


