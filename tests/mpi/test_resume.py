"""Checkpoint/resume on real ranks: a run killed mid-way and resumed ends bitwise equal.

Two launches: the run to be killed, then one job that resumes it (``fedsheaf run
--resume``'s own entry point, :func:`fedsheaf.cli.main.main`, as the first thing the job
does) and then runs the uninterrupted reference (``fedsheaf.run``).
"""

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
# (enough epochs after the kill at epoch 2 that the run cannot finish before it)
EPOCHS = 20
COMMON = ["train.steps_per_epoch=3", f"train.epochs={EPOCHS}", "seed=5"]

#: The second job: ``fedsheaf run --resume CUT``, then the reference run.
SCRIPT = """\
import json, sys
import fedsheaf
from fedsheaf.cli.main import main

cut, out, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if main(["run", "--resume", cut]) != 0:
    sys.exit("the resume failed")
fedsheaf.run("configs/quickstart.yaml", **overrides, **{"output.dir": out, "output.name": "ref"})
"""


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
    cut_dir = tmp_path / "cut"
    cut = BackgroundMpi(4, _args(tmp_path, "output.name=cut"), tmp_path / "cut.log")
    deadline = time.monotonic() + 150
    try:
        while _manifest_epoch(cut_dir) < 2 and cut.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.02)
    finally:
        cut.kill()  # preemption: the whole job dies at once
    assert not (cut_dir / "summary.json").exists(), "the run finished before it was killed"
    killed_at = _manifest_epoch(cut_dir)
    assert 2 <= killed_at < EPOCHS
    ckpt = checkpoint.latest(cut_dir, 4)
    assert ckpt is not None
    before = checkpoint.load_rank(ckpt, 0)["wall_seconds"]  # the first launch's, up to it
    assert before > 0

    (tmp_path / "script.py").write_text(SCRIPT)
    reference_overrides = json.dumps({k: int(v) for k, v in (o.split("=") for o in COMMON)})
    args = [str(tmp_path / "script.py"), str(cut_dir), str(tmp_path), reference_overrides]
    proc = run_mpi(4, args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resuming {cut_dir} after epoch {killed_at}" in proc.stdout
    # the wall time counts both launches (up to the checkpoint the second continued from;
    # the reference run, a fresh one, says no "in all")
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
