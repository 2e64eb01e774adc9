"""Checkpoint/resume on real ranks: a run killed mid-way and resumed ends bitwise equal."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import MPIEXEC, BackgroundMpi, run_mpi, untimed

pytestmark = pytest.mark.mpi
EPOCHS = 30
COMMON = ["train.steps_per_epoch=3", f"train.epochs={EPOCHS}", "seed=5"]


def _args(out: Path, name: str) -> list[str]:
    return ["-m", "fedsheaf", "run", "configs/quickstart.yaml", name, f"output.dir={out}", *COMMON]


def _manifest_epoch(run: Path) -> int:
    try:
        return json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"]
    except (OSError, ValueError, KeyError):
        return 0


def test_killed_run_resumes_to_the_same_numbers(tmp_path):
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    # the reference and the run to be killed start together (startup dominates on 2 cores)
    ref = BackgroundMpi(4, _args(tmp_path, "output.name=ref"), tmp_path / "ref.log")
    cut_dir = tmp_path / "cut"
    cut = BackgroundMpi(4, _args(tmp_path, "output.name=cut"), tmp_path / "cut.log")
    deadline = time.monotonic() + 150
    try:
        while _manifest_epoch(cut_dir) < 2 and cut.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.02)
    finally:
        cut.kill()  # preemption: the whole job dies at once
        try:
            code = ref.wait(timeout=240)
        finally:
            ref.kill()
    assert code == 0, ref.output()
    assert not (cut_dir / "summary.json").exists(), "the run finished before it was killed"
    killed_at = _manifest_epoch(cut_dir)
    assert 2 <= killed_at < EPOCHS
    ckpt = checkpoint.latest(cut_dir, 4)
    assert ckpt is not None
    before = checkpoint.load_rank(ckpt, 0)["wall_seconds"]  # the first launch's, up to it
    assert before > 0

    proc = run_mpi(4, ["-m", "fedsheaf", "run", "--resume", str(cut_dir)], timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {cut_dir} after epoch {killed_at}" in proc.stdout
    # the wall time counts both launches (up to the checkpoint the second continued from)
    this_launch = re.search(r"\[([\d.]+)s in all, ([\d.]+)s in this launch;", proc.stdout)
    assert this_launch is not None, proc.stdout[-500:]
    total = json.loads((cut_dir / "summary.json").read_text())["wall_seconds"]
    assert total == pytest.approx(before + float(this_launch[2]), abs=0.051)
    assert f"{total:.1f}" == this_launch[1]
    reference = read_metrics(tmp_path / "ref" / "metrics.jsonl")
    resumed = read_metrics(cut_dir / "metrics.jsonl")
    assert [r["epoch"] for r in resumed] == list(range(1, EPOCHS + 1))
    assert untimed(resumed) == untimed(reference)
    summaries = [json.loads((d / "summary.json").read_text()) for d in (tmp_path / "ref", cut_dir)]
    assert untimed(summaries[0]) == untimed(summaries[1])
    kept = sorted(p.name for p in (cut_dir / "checkpoints").glob("epoch-*"))
    assert kept == [f"epoch-{EPOCHS - 1:04d}", f"epoch-{EPOCHS:04d}"]
