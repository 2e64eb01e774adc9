"""Checkpoints of runs of every family: one state file per rank, one manifest per run.

Layout inside a run directory::

    checkpoints/
      epoch-0004/rank-0.pt … rank-{N-1}.pt
      epoch-0005/rank-0.pt … rank-{N-1}.pt
      latest.json      {"epoch": 5, "n_ranks": N, "epochs": [4, 5],
                        "files": {"5": {"rank-0.pt": {"sha256": ..., "bytes": ...}, ...}, ...},
                        "placement": {"5": [[0, 1], [2, 3]], "4": [[0], [1], [2], [3]]}}

Protocol (driven by :mod:`fedsheaf.rundir.lifecycle`): after an epoch every rank
writes its own file with :func:`save_rank` (atomically: temp file + rename);
after a barrier, rank 0 calls :func:`commit`, which atomically rewrites the
manifest to include the new epoch and deletes checkpoints beyond the ``keep``
newest. A checkpoint exists for a reader only once the manifest names it, so a
job killed at any moment leaves the previous complete checkpoint usable.
:func:`latest` returns the newest listed checkpoint whose rank files are all on
disk. Nothing here knows about MPI.

Every rank hashes its file as it writes it (:func:`save_rank`); the manifest that commits
an epoch records each file's SHA-256 and size, and :func:`load_rank` checks them before
it reads a file: torch does not check its archives' checksums, so bytes garbled on disk
would otherwise load as wrong numbers. Manifests from before fedsheaf recorded digests
load as they are.

A decentralized run also records, per epoch, which agents each rank file holds
(``placement``; a manifest without it, from before agents shared ranks: rank r held agent
r). Its checkpoints are then read on any rank count (:func:`read_agents`: a rank reads the
files that hold its agents, rank 0 also rank 0's for the run's history and clock), and a
checkpoint is complete when it has every file it was written with, whatever the job's rank
count now. Other families (server-based, hub) resume only on the rank count they wrote.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from fedsheaf.util.atomic import atomic_write_json, atomic_write_text, json_safe, write_atomic
from fedsheaf.util.errors import CheckpointError

FORMAT = 1
MANIFEST = "latest.json"

#: The agents of every rank file of a checkpoint, by rank (:func:`fedsheaf.graphs.place_agents`).
Placement = tuple[tuple[int, ...], ...]


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
    #: What the manifest recorded of each rank file (``{"rank-0.pt": {"sha256", "bytes"}}``),
    #: checked before the file is read; None: nothing recorded (an older manifest).
    files: dict[str, dict[str, Any]] | None = field(default=None, compare=False)
    #: The agents each rank file holds (a decentralized run's), by rank; None: not known
    #: (a family without agents on ranks, or the rank count of the job reading it).
    placement: Placement | None = field(default=None, compare=False)

    @property
    def path(self) -> Path:
        return epoch_dir(self.run_dir, self.epoch)

    def rank_file(self, rank: int) -> Path:
        return rank_file(self.run_dir, self.epoch, rank)

    def holder(self, agent: int) -> int:
        """The rank whose file holds agent ``agent``'s state."""
        assert self.placement is not None, "a checkpoint without a placement"
        return next(r for r, block in enumerate(self.placement) if agent in block)


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
class _Hashing:
    """A file being written, hashed on the way (what torch.save writes to)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += memoryview(data).nbytes
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def file_digest(path: str | Path) -> dict[str, Any]:
    """``{"sha256": ..., "bytes": ...}`` of the file ``path``, read from disk."""
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
            size += len(chunk)
    return {"sha256": sha.hexdigest(), "bytes": size}


def save_rank(run_dir: str | Path, epoch: int, rank: int, state: dict[str, Any]) -> dict[str, Any]:
    """Atomically write one rank's state for ``epoch``; returns what :func:`commit` records
    of the file, ``{"sha256": ..., "bytes": ...}``, hashed as it was written."""
    payload = {"format": FORMAT, "epoch": epoch, "rank": rank, **state}
    hashing: list[_Hashing] = []

    def write(fh: IO[bytes]) -> None:
        hashing.append(_Hashing(fh))
        # (torch's stub wants IO[bytes]; torch.save needs only write() and flush())
        torch.save(payload, hashing[-1])  # type: ignore[arg-type]

    path = write_atomic(rank_file(run_dir, epoch, rank), write)
    if hashing[-1].size != path.stat().st_size:  # (torch wrote around the stream)
        return file_digest(path)
    return {"sha256": hashing[-1].sha.hexdigest(), "bytes": hashing[-1].size}


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
        or not _digests_ok(data.get("files", {}))
        or not _placements_ok(data.get("placement", {}))
    ):
        raise CheckpointError(f"checkpoint manifest {path} is malformed{_LOST}")
    return data


def _digests_ok(files: Any) -> bool:
    """Whether a manifest's ``files`` is ``{epoch: {rank file: {"sha256", "bytes"}}}``."""
    return isinstance(files, dict) and all(
        isinstance(per_epoch, dict)
        and all(
            isinstance(rec, dict)
            and isinstance(rec.get("sha256"), str)
            and isinstance(rec.get("bytes"), int)
            for rec in per_epoch.values()
        )
        for per_epoch in files.values()
    )


def _placements_ok(placements: Any) -> bool:
    """Whether a manifest's ``placement`` is ``{epoch: [[agent, ...] per rank]}``, each
    placing agents 0..N-1 once, at least one on every rank."""
    if not isinstance(placements, dict):
        return False
    for blocks in placements.values():
        if not isinstance(blocks, list) or not all(
            isinstance(b, list) and b and all(type(i) is int for i in b) for b in blocks
        ):
            return False
        agents = sorted(i for b in blocks for i in b)
        if agents != list(range(len(agents))):
            return False
    return True


def one_per_rank(n: int) -> Placement:
    """Rank r holds agent r (what a manifest without a placement means for a decentralized
    run: agents shared no rank before it was recorded)."""
    return tuple((r,) for r in range(n))


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
    files: list[dict[str, Any] | None] | None = None,
    placement: Sequence[Sequence[int]] | None = None,
) -> Checkpoint:
    """Record ``epoch`` as complete (call once every rank has saved) and prune old ones.

    The manifest is replaced atomically, then checkpoint folders that are neither
    among the ``keep`` newest listed epochs nor newer than ``epoch`` are deleted.
    ``experiment``: the settings the checkpoints were written under
    (:func:`fedsheaf.rundir.resume.experiment_keys`), for :func:`recorded_experiment`; ``data``:
    the data set's fingerprint (:func:`fedsheaf.data.sources.data_digest`), for
    :func:`recorded_data`; ``files``: what each rank's :func:`save_rank` returned, by rank
    (None: the rank files are hashed here, as they are on disk now); ``placement``: the
    agents each rank file holds (a decentralized run's), recorded so that another rank
    count can read them (:func:`read_agents`).
    """
    manifest = _read_manifest(run_dir)
    previous = manifest["epochs"] if manifest else []
    placements = dict((manifest or {}).get("placement", {}))
    if placement is not None:
        record_placement = [[int(i) for i in block] for block in placement]
        assert len(record_placement) == n_ranks, "one block of agents per rank"
        n_agents = sum(map(len, record_placement))
        # the kept epochs of a manifest from before placements were recorded: rank r held
        # agent r where there was one rank per agent; other ones (written on this rank count
        # or not) cannot be told apart once the count changes, and go
        old_ranks = manifest["n_ranks"] if manifest else n_ranks
        for e in previous:
            if str(e) not in placements:
                if old_ranks == n_agents:
                    placements[str(e)] = [[r] for r in range(n_agents)]
                elif old_ranks != n_ranks:
                    previous = [p for p in previous if p != e]
        placements[str(epoch)] = record_placement
    epochs = sorted({e for e in previous if e < epoch} | {epoch})[-keep:]
    kept = set(map(str, epochs))
    digests = {k: v for k, v in (manifest or {}).get("files", {}).items() if k in kept}
    if files is None:
        files = [
            file_digest(f) if (f := rank_file(run_dir, epoch, r)).is_file() else None
            for r in range(n_ranks)
        ]
    digests[str(epoch)] = {
        rank_file(run_dir, epoch, r).name: rec for r, rec in enumerate(files) if rec is not None
    }
    record: dict[str, Any] = {
        "format": FORMAT,
        "epoch": epoch,
        "n_ranks": n_ranks,
        "epochs": epochs,
        "files": digests,
    }
    placements = {k: v for k, v in placements.items() if k in kept}
    if placements:
        record["placement"] = placements
    if experiment is not None:
        record["experiment"] = experiment
    if data is not None:
        record["data"] = data
    atomic_write_json(checkpoints_dir(run_dir) / MANIFEST, record)
    for folder in checkpoints_dir(run_dir).glob("epoch-*"):
        number = _epoch_of(folder)
        if number is not None and number not in epochs and number <= epoch:
            _remove_epoch(folder)
    recorded = placements.get(str(epoch))
    return Checkpoint(
        Path(run_dir),
        epoch,
        n_ranks,
        digests[str(epoch)],
        None if recorded is None else tuple(tuple(b) for b in recorded),
    )


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
    kept = set(map(str, manifest["epochs"]))
    manifest["files"] = {k: v for k, v in manifest.get("files", {}).items() if k in kept}
    if "placement" in manifest:
        manifest["placement"] = {k: v for k, v in manifest["placement"].items() if k in kept}
    atomic_write_json(checkpoints_dir(run_dir) / MANIFEST, manifest)


def _epoch_of(folder: Path) -> int | None:
    tail = folder.name.removeprefix("epoch-")
    return int(tail) if tail.isdigit() else None


#: The names fedsheaf gives the files of a checkpoint folder: the rank files, and the
#: temporary files an atomic write of one leaves when its job is killed.
_RANK_FILE = re.compile(r"rank-\d+\.pt|\.rank-\d+\.pt\.[0-9a-f]+\.tmp")


def _remove_epoch(folder: Path) -> None:
    """Delete what fedsheaf wrote in checkpoint folder ``folder``, then the folder if that
    leaves it empty: whatever else somebody put there stays."""
    try:
        for f in folder.iterdir():
            if _RANK_FILE.fullmatch(f.name) and f.is_file():
                f.unlink(missing_ok=True)
        folder.rmdir()
    except OSError:
        pass  # (not empty, or gone already)


# ---- reading ---------------------------------------------------------------
def complete(run_dir: str | Path, n_ranks: int, agents: int | None = None) -> list[Checkpoint]:
    """The complete checkpoints of a run directory, newest first.

    Complete means: listed in the manifest and every rank file it was written with
    present. A manifest written by a job with another rank count is an error, unless
    ``agents`` is given (:func:`listed`).
    """
    return [ckpt for ckpt in listed(run_dir, n_ranks, agents) if missing_file(ckpt) is None]


def listed(run_dir: str | Path, n_ranks: int, agents: int | None = None) -> list[Checkpoint]:
    """The checkpoints the manifest of ``run_dir`` names, newest first, whether or not
    their files are all still there (a resume says which one is missing: :func:`load_rank`).

    ``agents``: a decentralized run's agent count; its checkpoints carry the agents of each
    rank file (recorded, or one per rank where a manifest from before placements were
    recorded has one rank per agent), which a job of any rank count can read
    (:func:`read_agents`). Without ``agents``, or without a placement, a checkpoint
    written by a job with another rank count is an error.
    """
    manifest = _read_manifest(run_dir)
    if manifest is None:
        return []
    digests = manifest.get("files", {})
    placements = manifest.get("placement", {})
    found = []
    for epoch in sorted(manifest["epochs"], reverse=True):
        blocks = placements.get(str(epoch))
        placement = None if blocks is None else tuple(tuple(b) for b in blocks)
        ranks = manifest["n_ranks"] if placement is None else len(placement)
        if agents is not None and placement is None and ranks == agents:
            placement = one_per_rank(agents)
        if agents is None or placement is None:  # (then read on the same rank count only)
            if ranks != n_ranks:
                raise CheckpointError(
                    f"cannot resume {run_dir}: its checkpoints hold {ranks} ranks "
                    f"but this job has {n_ranks}"
                )
            placement = None
        elif sum(map(len, placement)) != agents:
            raise CheckpointError(
                f"cannot resume {run_dir}: its checkpoints hold "
                f"{sum(map(len, placement))} agents but this run has {agents}"
            )
        found.append(Checkpoint(Path(run_dir), epoch, ranks, digests.get(str(epoch)), placement))
    return found


def missing_file(ckpt: Checkpoint) -> Path | None:
    """The first of ``ckpt``'s rank files (those it was written with) that is not on disk
    (None: none)."""
    return next((f for r in range(ckpt.n_ranks) if not (f := ckpt.rank_file(r)).is_file()), None)


def latest(run_dir: str | Path, n_ranks: int, agents: int | None = None) -> Checkpoint | None:
    """The newest complete checkpoint of a run directory, or None if there is none."""
    found = complete(run_dir, n_ranks, agents)
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


def check_rank_file(ckpt: Checkpoint, rank: int) -> None:
    """Refuse rank ``rank``'s file of ``ckpt`` if it is missing, or if its size or SHA-256
    differ from what the manifest recorded when it was written (a file cut short, bytes
    garbled on disk): torch would load garbled tensor bytes without a word."""
    path = ckpt.rank_file(rank)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    recorded = (ckpt.files or {}).get(path.name)
    if recorded is None:
        return  # written before fedsheaf recorded digests
    size = path.stat().st_size
    if size < recorded["bytes"]:
        raise CheckpointError(
            f"checkpoint file {path} is truncated ({size} of its {recorded['bytes']} bytes)"
        )
    if size != recorded["bytes"]:
        raise CheckpointError(
            f"checkpoint file {path} is damaged ({size} bytes, not the {recorded['bytes']} written)"
        )
    if file_digest(path)["sha256"] != recorded["sha256"]:
        raise CheckpointError(
            f"checkpoint file {path} is damaged (sha256 mismatch: its bytes changed since "
            "it was written)"
        )


def load_rank(ckpt: Checkpoint, rank: int) -> dict[str, Any]:
    """One rank's saved state (tensors on CPU), once :func:`check_rank_file` has found it
    as it was written."""
    path = ckpt.rank_file(rank)
    check_rank_file(ckpt, rank)
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


#: What rank 0's state holds for the whole run, beside its agents' state.
RUN_KEYS = ("history", WallClock.KEY)
#: What :func:`save_rank` adds to every rank's state.
_HEADER = ("format", "epoch", "rank")


def agent_part(state: dict[str, Any], agent: int, path: Path | None = None) -> dict[str, Any]:
    """Agent ``agent``'s state in a rank's checkpoint state: ``state["agents"][agent]``
    where the rank held several agents, else the state less what the rank adds
    (:data:`RUN_KEYS` and the file's header). ``path``: the file read, named when it does
    not hold the agent."""
    if "agents" in state:
        parts = state["agents"]
        if not isinstance(parts, dict) or agent not in parts:
            where = f"checkpoint file {path}" if path is not None else "the checkpoint"
            raise CheckpointError(f"{where} does not hold agent {agent}")
        part: dict[str, Any] = parts[agent]
        return part
    return {k: v for k, v in state.items() if k not in (*RUN_KEYS, *_HEADER)}


def read_agents(ckpt: Checkpoint, agents: Sequence[int], root: bool) -> dict[str, Any]:
    """What a rank holding ``agents`` resumes from (``root``: the job's rank 0), from a
    decentralized run's checkpoint written on any rank count: ``{"agents": {i: state}}``,
    with rank 0's :data:`RUN_KEYS` on the root.

    Reads, checked as :func:`load_rank` checks them, the files whose ranks held
    ``agents`` and (root) rank 0's. Where that is only this rank's own file in the same
    layout (the job has the checkpoint's rank count and placement), that file as it is.
    """
    if ckpt.placement is None:
        raise CheckpointError(f"checkpoint {ckpt.path} does not record which agents it holds")
    needed = sorted({ckpt.holder(i) for i in agents} | ({0} if root else set()))
    if len(needed) == 1 and ckpt.placement[needed[0]] == tuple(agents):
        return load_rank(ckpt, needed[0])
    states = {rank: load_rank(ckpt, rank) for rank in needed}
    parts = {}
    for i in agents:
        holder = ckpt.holder(i)
        parts[i] = agent_part(states[holder], i, ckpt.rank_file(holder))
    out: dict[str, Any] = {"agents": parts}
    if root:
        out.update({k: states[0][k] for k in RUN_KEYS if k in states[0]})
    return out


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
    checkpoints go (results.RunDir deletes the metrics). Only what fedsheaf writes
    there is deleted (rank files, the manifest, temporary files of either); other files
    stay, with the folders that hold them."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return
    for folder in root.glob("epoch-*"):
        if _epoch_of(folder) is not None and folder.is_dir():
            _remove_epoch(folder)
    for f in [root / MANIFEST, *root.glob(f".{MANIFEST}.*.tmp")]:
        f.unlink(missing_ok=True)
    try:
        root.rmdir()
    except OSError:
        pass  # somebody else's files stay


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
