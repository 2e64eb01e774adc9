"""Failures on real ranks end the job quickly, clearly, non-zero, with checkpoints intact.

Decentralized: one story, to keep launches few: a run loses a rank (SIGKILL) after a few
checkpoints; then the same run is resumed with one agent's learning rate set
absurdly high, so that agent's loss turns NaN on the first step after the
checkpoint. Server-based: a FedRep client diverges on a worker while the server waits.
Hub-based: a checkpoint that does not fit is refused (test_variants_hub.py). A raised
exception in a toy program is covered by test_runtime.py, a missing data file at start
by test_run.py and test_hardening.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fedsheaf.rundir import checkpoint
from tests.conftest import MPIEXEC, BackgroundMpi, run_mpi

pytestmark = pytest.mark.mpi


def _rank_pids(tag: str, launcher: int) -> list[int]:
    """Python rank processes whose command line carries ``tag`` (not the launcher)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == launcher:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"python" in Path(argv[0].decode()).name.encode() and tag.encode() in argv:
            pids.append(int(entry.name))
    return pids


def _assert_intact(run: Path, at_least: int) -> int:
    ckpt = checkpoint.latest(run, 4)
    assert ckpt is not None and ckpt.epoch >= at_least
    for rank in range(4):
        assert checkpoint.load_rank(ckpt, rank)["epoch"] == ckpt.epoch
    return ckpt.epoch


def test_lost_rank_and_diverged_agent_stop_the_job(tmp_path):
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    name = f"lost-{uuid.uuid4().hex[:12]}"  # unique command line, to find the ranks
    run = tmp_path / name
    args = [
        "-m",
        "fedsheaf",
        "run",
        "configs/quickstart.yaml",
        f"output.dir={tmp_path}",
        f"output.name={name}",
        "train.epochs=500",
        "train.steps_per_epoch=3",
    ]
    job = BackgroundMpi(4, args, tmp_path / "out.txt")
    try:
        deadline = time.monotonic() + 150
        while (checkpoint.latest(run, 4) or checkpoint.Checkpoint(run, 0, 4)).epoch < 2:
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.05)
        victim = _rank_pids(f"output.name={name}", job.pid)[-1]
        os.kill(victim, signal.SIGKILL)
        code = job.proc.wait(timeout=60)  # the job ends instead of hanging
    finally:
        job.kill()  # what is left of it, if anything
    out = job.output()
    assert code != 0
    assert f"PID {victim}" in out and "signal 9" in out, out[-2000:]
    epoch = _assert_intact(run, 2)

    # resume, with agent 1 diverging on its first step: one message, non-zero, checkpoint kept
    # (its neighbours have posted their pilots and wait with an exchange in flight)
    resume = ["--resume", str(run), "agents[1].lr=1e30", "sheaf.overlap_exchange=true"]
    proc2 = run_mpi(4, ["-m", "fedsheaf", "run", *resume], timeout=120)
    assert proc2.returncode != 0
    message = f"fedsheaf: error on rank 1: agent 1: loss became nan in epoch {epoch + 1}, step"
    assert proc2.stderr.count(message) == 1, proc2.stderr
    assert proc2.stderr.count("fedsheaf: error") == 1 and "Traceback" not in proc2.stderr
    assert _assert_intact(run, 2) == epoch
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["epoch"] == epoch
    assert not (run / "summary.json").exists()
    # the run says how it ended, for watch and report (a killed job could not)
    failure = json.loads((run / "failed.json").read_text())
    assert failure["rank"] == 1
    assert failure["error"].startswith(f"agent 1: loss became nan in epoch {epoch + 1}, step")
    watched = subprocess.run(
        [sys.executable, "-m", "fedsheaf", "watch", "--once", str(run)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watched.returncode == 1
    assert watched.stdout.splitlines()[-1] == f"failed on rank 1: {failure['error']}"


@pytest.mark.parametrize("placement", ["balanced", "dynamic"])
def test_diverged_client_stops_a_server_based_run(tmp_path, fmnist_root, placement):
    """FedRep at np = 3: two good rounds (checkpointed), then a resume with an absurd
    learning rate: a client's loss turns NaN in round 3 on a worker while the server
    waits (in its gather, or dealing clients under dynamic placement); the job ends
    at once, non-zero, naming rank, client and cause, and the checkpoint after round
    2 stays the newest."""
    from tests.mpi.test_resume_server import _config, _fedrep

    cfg = _fedrep(fmnist_root)
    cfg["federated"]["rounds"] = 2
    cfg["federated"]["placement"] = placement
    path = _config(tmp_path, cfg)
    run = tmp_path / "runs" / "diverge"
    base = ["-m", "fedsheaf", "run"]
    good = run_mpi(3, [*base, str(path), "output.name=diverge", "checkpoint.every=1"])
    assert good.returncode == 0, good.stderr
    (run / "summary.json").unlink()  # pretend it was cut short, to resume with more rounds

    bad = run_mpi(3, [*base, "--resume", str(run), "rounds=4", "train.lr=1e30"], timeout=120)
    assert bad.returncode != 0
    assert "resuming" in bad.stdout and "after round 2" in bad.stdout
    # (prterun, relaying a rank's stderr as it aborts, once put a NUL byte before the line)
    said = [ln.lstrip("\0") for ln in bad.stderr.splitlines()]
    lines = [ln for ln in said if ln.startswith("fedsheaf: error")]
    pattern = r"fedsheaf: error on rank ([12]): client \d+: loss became nan in round 3 \("
    # both workers diverge; the first to write failed.json says it, once
    assert len(lines) == 1 and (found := re.match(pattern, lines[0])), bad.stderr
    assert json.loads((run / "failed.json").read_text())["rank"] == int(found.group(1))
    assert "Traceback" not in bad.stderr
    assert checkpoint.latest(run, 3).epoch == 2
