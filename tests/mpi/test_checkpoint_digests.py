"""Damaged checkpoints on real ranks: found by their digests, never loaded.

torch reads a checkpoint file whose tensor bytes were garbled without a word, so a
resume would continue from wrong numbers. Every rank file's SHA-256 and size are recorded
in the manifest that commits it; before reading, each rank checks its own file, and if any
rank's file of the newest checkpoint is damaged, truncated or missing, every rank falls
back to the checkpoint before it, with a line saying why (none intact: a refusal). The
fallback ends exactly as a run never damaged. The same for a server-based run, whose
server (rank 0) writes one of the files. Also: real jobs refuse another tool's directory
(tests/unit/test_run_dir_marker.py has the rest of what is fedsheaf's), and resume a run
directory from before fedsheaf marked them, marking it.

Both tests share two launches of 2 ranks (a module fixture: the first runs, then every
resume), several ``fedsheaf run`` in one job, to keep the file fast on a 2-core machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fedsheaf.rundir import checkpoint, run_lock
from fedsheaf.rundir.files import MARKER, read_metrics
from tests.conftest import MPIEXEC, run_mpi_batch, untimed
from tests.mpi.test_resume_server import _head_fedavg as resumed_head_fedavg

pytestmark = pytest.mark.mpi
NP = 2


def _output(proc) -> str:
    return proc.stdout + proc.stderr


def _one_error(proc) -> str:
    assert proc.returncode == 2, _output(proc)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedsheaf: error")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    return []


def _garble(path: Path) -> None:
    """Flip four bytes in the middle of the largest floating-point tensor that checkpoint
    file ``path`` holds (the archive stores it uncompressed), as a failing disk would, and
    make sure torch still reads the file without a word: only a digest can tell."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    floats = [t for t in _tensors(state) if t.is_floating_point() and t.numel() >= 4]
    tensor = max(floats, key=lambda t: t.numel()).contiguous()
    raw = tensor.numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(raw)
    assert at > 0, "the tensor's bytes are not stored as they are"
    middle = at + (len(raw) // 2) // tensor.element_size() * tensor.element_size()
    data[middle : middle + 4] = bytes(b ^ 0x5A for b in data[middle : middle + 4])
    path.write_bytes(bytes(data))
    garbled = torch.load(path, map_location="cpu", weights_only=True)  # no error
    pairs = zip(_tensors(garbled), _tensors(state), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)


def _graph_config(tmp: Path) -> Path:
    graph = {
        "name": "duo",
        "nodes": [{"id": 0, "dim": 8}, {"id": 1, "dim": 8}],
        "edges": [[0, 1]],
    }
    (tmp / "duo.yaml").write_text(yaml.safe_dump(graph))
    cfg = {
        "name": "digest",
        "algorithm": "sheaf_frl",
        "seed": 5,
        "graph": str(tmp / "duo.yaml"),
        "data": {"dataset": "digits", "shift": 0.7, "pilot_fraction": 0.1},
        "agents": [
            {"encoder": [16, 8], "head": [16], "classes": [0, 1, 2, 3, 4, 5]},
            {"encoder": [8], "head": [16], "classes": [4, 5, 6, 7, 8, 9]},
        ],
        "train": {"epochs": 4, "steps_per_epoch": 2, "batch_size": 16},
        "sheaf": {"pilot_batch": 16},
        "checkpoint": {"every": 1, "keep": 3},
        "output": {"dir": str(tmp / "runs")},
    }
    (tmp / "digest.yaml").write_text(yaml.safe_dump(cfg))
    return tmp / "digest.yaml"


def _same_as(run: Path, ref: Path) -> None:
    """``run`` ended exactly as ``ref`` (timings aside)."""
    assert untimed(read_metrics(run / "metrics.jsonl")) == untimed(
        read_metrics(ref / "metrics.jsonl")
    )
    summaries = [json.loads((d / "summary.json").read_text()) for d in (run, ref)]
    assert untimed(summaries[0]) == untimed(summaries[1])


def _head_fedavg(tmp: Path) -> Path:
    # (test_resume_server's head-FedAvg run: 4 clients, 4 rounds)
    cfg = {**resumed_head_fedavg(None), "name": "digest", "output": {"dir": str(tmp / "runs")}}
    (tmp / "head.yaml").write_text(yaml.safe_dump(cfg))
    return tmp / "head.yaml"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both tests' runs in two launches of NP ranks (several ``fedsheaf run`` in one job:
    tests/conftest.py's run_mpi_batch; startup dominates these short runs on 2 cores).

    First: the graph run's reference (4 epochs) and a run of 3 epochs, two runs into
    another tool's directories, and the server run's reference (4 rounds) and a run of 3
    rounds. Then their checkpoints are damaged, and: the cut run and three copies of it
    resumed to 4 epochs, and the server run resumed to 4 rounds."""
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    tmp_path = tmp_path_factory.mktemp("digests")
    (tmp_path / "graph").mkdir()
    (tmp_path / "server").mkdir()
    config = str(_graph_config(tmp_path / "graph"))
    head = str(_head_fedavg(tmp_path / "server"))
    runs = tmp_path / "graph" / "runs"
    # another tool's directories, refused by the job as by `fedsheaf check`
    lightning = runs / "lightning"
    (lightning / "checkpoints").mkdir(parents=True)
    (lightning / "checkpoints" / "lightning-epoch=99.ckpt").write_bytes(b"their weights")
    theirs = runs / "theirs"
    theirs.mkdir()
    (theirs / "config.yaml").write_text("trainer:\n  max_epochs: 10\n")
    first = _batch(
        tmp_path,
        [config, "output.name=ref"],
        [config, "output.name=cut", "train.epochs=3"],
        [config, "output.name=lightning", "output.overwrite=true"],
        [config, "output.name=theirs"],
        [head, "output.name=ref", "checkpoint.every=0"],
        [head, "output.name=short", "federated.rounds=3", "checkpoint.every=1"],
    )
    found: dict[str, Any] = {"runs": runs, "first": first[:4], "server_first": first[4:]}
    for proc in first[:2] + first[4:]:
        assert proc.returncode == 0, _output(proc)

    cut = runs / "cut"
    found["cut_epochs"] = json.loads((cut / "checkpoints" / "latest.json").read_text())["epochs"]
    copies = {}
    for name in ("allbad", "torn", "gone"):
        copies[name] = runs / name
        shutil.copytree(cut, copies[name])
    found["copies"] = copies
    # every checkpoint of allbad damaged on rank 1: refused
    for epoch in (1, 2, 3):
        _garble(checkpoint.rank_file(copies["allbad"], epoch, 1))
    found["kept"] = {
        f: (copies["allbad"] / f).read_bytes() for f in ("summary.json", "metrics.jsonl")
    }
    found["manifest"] = (copies["allbad"] / "checkpoints" / "latest.json").read_bytes()
    # the newest checkpoint of torn cut short on rank 0, of gone lost on rank 1; gone is also
    # a run directory from before fedsheaf marked them (no mark, no lock)
    torn = checkpoint.rank_file(copies["torn"], 3, 0)
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    found["torn"], found["torn_size"] = torn, torn.stat().st_size  # (resumed: its own 3)
    found["lost"] = checkpoint.rank_file(copies["gone"], 3, 1)
    found["lost"].unlink()
    (copies["gone"] / MARKER).unlink()
    (copies["gone"] / run_lock.LOCK_FILE).unlink()
    # and cut's own newest checkpoint garbled on rank 1
    found["garbled"] = checkpoint.rank_file(cut, 3, 1)
    _garble(found["garbled"])
    # the server run's newest checkpoint garbled on the server
    short = tmp_path / "server" / "runs" / "short"
    found["server_garbled"] = checkpoint.rank_file(short, 3, 0)
    _garble(found["server_garbled"])

    # each trained on to 4 epochs (as ref), and the server run to 4 rounds
    second = _batch(
        tmp_path,
        *(
            ["--resume", str(d), "train.epochs=4"]
            for d in (cut, copies["allbad"], copies["torn"], copies["gone"])
        ),
        ["--resume", str(short), "federated.rounds=4"],
    )
    found["second"], found["server_resumed"] = second[:4], second[4]
    found["server"] = tmp_path / "server" / "runs"
    return found


def _batch(tmp: Path, *runs: list[str]) -> list[Any]:
    """``fedsheaf run ARGS`` for each ARGS, one after another in one job of NP ranks."""
    return run_mpi_batch(NP, [["run", *args] for args in runs], tmp, timeout=600)


def test_a_damaged_checkpoint_falls_back_to_the_one_before_on_every_rank(jobs):
    """A damaged, truncated or missing rank file of the newest checkpoint: every rank
    resumes from the one before, ending as a run never damaged; all damaged: refused,
    the run left as it was. Also: another tool's directories are refused, and a run
    directory from before fedsheaf marked them is resumed and marked."""
    runs = jobs["runs"]
    ref, cut, foreign_ckpt, foreign_cfg = jobs["first"]
    lightning, theirs = runs / "lightning", runs / "theirs"
    line = _one_error(foreign_ckpt)
    assert line.endswith(
        f"run directory {lightning} exists and is not a fedsheaf run (it holds checkpoints/); "
        "choose another output.name or output.dir"
    )
    left = sorted(p.name for p in lightning.rglob("*"))
    assert left == ["checkpoints", "lightning-epoch=99.ckpt"]  # no lock, no mark
    line = _one_error(foreign_cfg)
    assert "(it holds config.yaml; its config.yaml is not a fedsheaf config)" in line
    assert sorted(p.name for p in theirs.iterdir()) == ["config.yaml"]

    ref, cut = runs / "ref", runs / "cut"
    assert jobs["cut_epochs"] == [1, 2, 3]
    copies, garbled, torn, lost = (jobs[k] for k in ("copies", "garbled", "torn", "lost"))
    resumed, allbad, truncated, missing = jobs["second"]
    for proc, run, said in (
        (resumed, cut, f"{garbled} is damaged (sha256 mismatch: its bytes changed since it was "),
        (truncated, copies["torn"], f"{torn} is truncated ({jobs['torn_size']} of its "),
        (missing, copies["gone"], f"{lost} is missing); trying the one before"),
    ):
        out = _output(proc)
        assert proc.returncode == 0, out
        assert f"the checkpoint after epoch 3 cannot be used (checkpoint file {said}" in out
        assert f"resuming {run} after epoch 2" in out
        _same_as(run, ref)
    assert json.loads((copies["gone"] / MARKER).read_text())["format"] == 1  # marked now

    line = _one_error(allbad)
    assert f"cannot resume {copies['allbad']}: no checkpoint can be read (checkpoint file " in line
    assert "epoch-0003/rank-1.pt is damaged (sha256 mismatch" in line
    assert line.endswith("start over with output.overwrite=true")
    kept = jobs["kept"]
    assert {f: (copies["allbad"] / f).read_bytes() for f in kept} == kept  # left as it was
    assert (copies["allbad"] / "checkpoints" / "latest.json").read_bytes() == jobs["manifest"]


def test_a_server_runs_damaged_checkpoint_falls_back_to_the_one_before(jobs):
    """The server's (rank 0's) file of the newest checkpoint garbled: the resume falls
    back to the one before and ends as a run never damaged."""
    ref, short = jobs["server"] / "ref", jobs["server"] / "short"
    garbled = jobs["server_garbled"]
    proc = jobs["server_resumed"]
    out = _output(proc)
    assert proc.returncode == 0, out
    assert (
        f"the checkpoint after round 3 cannot be used (checkpoint file {garbled} is damaged "
        "(sha256 mismatch" in out
    )
    assert f"resuming {short} after round 2" in out
    _same_as(short, ref)
