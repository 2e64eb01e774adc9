"""What a resume refuses (another experiment, a length before its checkpoint) and how it
survives a damaged newest checkpoint; relative paths are explained when they miss."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedsheaf.results import read_metrics
from tests.conftest import run_mpi, untimed

pytestmark = pytest.mark.mpi
COMMON = ["train.steps_per_epoch=2", "checkpoint.every=1", "checkpoint.keep=3", "seed=5"]


def _run(tmp: Path, *args: str, cwd: Path | None = None):
    return run_mpi(4, ["-m", "fedsheaf", "run", *args], cwd=cwd, timeout=240)


def _one_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedsheaf:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_resume_guards_and_fallback(tmp_path):
    quick = str(Path("configs/quickstart.yaml").resolve())
    out = f"output.dir={tmp_path}"
    ref = _run(tmp_path, quick, out, "output.name=ref", "train.epochs=4", *COMMON)
    assert ref.returncode == 0, ref.stderr
    # a run stopped after epoch 3 (its summary gone: it looks interrupted)
    cut = tmp_path / "cut"
    proc = _run(tmp_path, quick, out, "output.name=cut", "train.epochs=3", *COMMON)
    assert proc.returncode == 0, proc.stderr
    (cut / "summary.json").unlink()

    line = _one_error(_run(tmp_path, "--resume", str(cut), "seed=6", "train.epochs=4"))
    assert "cannot resume" in line and "experiment: seed (5 -> 6). A resumed run" in line
    line = _one_error(_run(tmp_path, "--resume", str(cut), "train.epochs=2"))
    assert "checkpointed after epoch 3, past the 2 epochs" in line
    away = tmp_path / "elsewhere"
    away.mkdir()
    line = _one_error(_run(tmp_path, "--resume", str(cut), "train.epochs=4", cwd=away))
    assert f"graphs/quick4.yaml does not exist (relative to the current directory {away})" in line

    # the newest checkpoint is damaged on one rank: resume from the one before it
    torn = cut / "checkpoints" / "epoch-0003" / "rank-2.pt"
    torn.write_bytes(torn.read_bytes()[:100])
    proc = _run(tmp_path, "--resume", str(cut), "train.epochs=4")
    assert proc.returncode == 0, proc.stderr
    assert "the checkpoint after epoch 3 cannot be used" in proc.stdout
    assert f"resuming {cut} after epoch 2" in proc.stdout
    resumed, reference = (read_metrics(d / "metrics.jsonl") for d in (cut, tmp_path / "ref"))
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    assert untimed(resumed) == untimed(reference)

    # every checkpoint damaged: an error, not a silent restart
    again = tmp_path / "again"
    shutil.copytree(cut, again)
    (again / "summary.json").unlink()
    for f in (again / "checkpoints").glob("epoch-*/rank-1.pt"):
        f.write_bytes(b"junk")
    line = _one_error(_run(tmp_path, "--resume", str(again), "train.epochs=4"))
    assert "no checkpoint can be read" in line
    assert json.loads((again / "checkpoints" / "latest.json").read_text())["epoch"] == 4
