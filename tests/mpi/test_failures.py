"""Failures on real ranks end the job quickly, clearly, non-zero, with checkpoints intact.

Decentralized: one story, to keep launches few: a run loses a rank (SIGKILL) after a few
checkpoints; then the same run is resumed with one agent's learning rate set
absurdly high, so that agent's loss turns NaN on the first step after the
checkpoint. Server-based: a FedRep client diverges on a worker while the server waits
(the good runs it resumes, one per placement, made in one job by a module fixture).
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
from tests.conftest import MPIEXEC, BackgroundMpi, mpi_env, run_mpi

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


PLACEMENTS = ("balanced", "dynamic")

#: Runs (argv: a JSON list of [config, overrides]) one after another in one job.
RUNS = """\
import json, sys
import fedsheaf

for config, overrides in json.loads(sys.argv[1]):
    fedsheaf.run(config, **overrides)
"""


@pytest.fixture(scope="module")
def good_fedrep_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Placement -> a FedRep run of two good rounds at np = 3, checkpointed after each:
    both in one job (each launch costs every rank its imports)."""
    from tests.conftest import shared_data_root
    from tests.mpi.test_resume_server import _config, _fedrep

    root = shared_data_root()
    if root is None:
        pytest.skip("no shared FashionMNIST copy (../shared/data) on this machine")
    work = tmp_path_factory.mktemp("diverge")
    cfg = _fedrep(root)
    cfg["federated"]["rounds"] = 2
    path = _config(work, cfg)
    runs = [
        [str(path), {"output.name": p, "federated.placement": p, "checkpoint.every": 1}]
        for p in PLACEMENTS
    ]
    good = run_mpi(3, ["-c", RUNS, json.dumps(runs)], timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    return {p: work / "runs" / p for p in PLACEMENTS}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_diverged_client_stops_a_server_based_run(good_fedrep_runs, placement):
    """FedRep at np = 3: two good rounds (checkpointed), then a resume with an absurd
    learning rate: a client's loss turns NaN in round 3 on a worker while the server
    waits (in its gather, or dealing clients under dynamic placement); the job ends
    at once, non-zero, naming rank, client and cause, and the checkpoint after round
    2 stays the newest."""
    run = good_fedrep_runs[placement]
    (run / "summary.json").unlink()  # pretend it was cut short, to resume with more rounds

    base = ["-m", "fedsheaf", "run"]
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


def _rank_pid(tag: str, launcher: int, rank: int) -> int:
    """The pid of world rank ``rank`` among the ranks whose command line carries ``tag``."""
    for pid in _rank_pids(tag, launcher):
        environ = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no rank {rank} among the processes of {tag}")


def _last_words(output: str) -> list[str]:
    """The lines in which a job's ranks say why it ended (prterun, relaying a rank's stderr
    as it aborts, may put a NUL byte before one)."""
    lines = [ln.lstrip("\0") for ln in output.splitlines()]
    return [ln for ln in lines if re.match(r"fedsheaf: (error|rank)", ln)]


@pytest.mark.parametrize("how", ["exception", "sigkill"])
def test_a_server_rank_that_dies_is_named_not_a_worker_terminated_after_it(
    tmp_path, fmnist_root, how
):
    """FedAvg at np = 3: the server (rank 0) dies mid-run, by an exception (its
    metrics.jsonl turned into a directory under it: a write error on rank 0 alone; its
    abort hook speaks) or by SIGKILL (nothing runs on it: a worker of its node sees its
    process end, at once, before the launcher's SIGTERM and SIGKILL, 0.25 s apart, end the
    workers). failed.json and the one line on standard error name rank 0, the server; no
    worker claims the job was cancelled. (Before, a SIGKILLed server left 'rank 1
    terminated by SIGTERM (the job was cancelled, ...)', or, written on SIGTERM, no note at
    all when the launcher's SIGKILL came first: 7 times in 30 on a busy 2-core machine.)"""
    from fedsheaf.rundir.files import FAILURE_FILE, read_json_object, read_metrics
    from tests.mpi.test_resume_server import _config

    cfg = {
        "name": "server",
        "algorithm": "fedavg",
        "seed": 1,
        "data": {"dataset": "fashionmnist", "root": str(fmnist_root), "limit": 600},
        "train": {"batch_size": 10, "lr": 0.01},
        "federated": {
            "clients": 5,
            "classes_per_client": 2,
            "train_per_client": 20,
            "test_per_client": 10,
            "rounds": 5000,
            "fraction": 0.5,
            "local_epochs": 1,
        },
    }
    path = _config(tmp_path, cfg)
    name = f"server-{how}-{uuid.uuid4().hex[:12]}"  # unique command line, to find the ranks
    run = tmp_path / "runs" / name
    args = ["-m", "fedsheaf", "run", str(path), f"output.name={name}"]
    job = BackgroundMpi(3, args, tmp_path / "out.txt")
    try:
        deadline = time.monotonic() + 180
        metrics = run / "metrics.jsonl"
        while not metrics.is_file() or len(read_metrics(metrics)) < 2:
            assert job.poll() is None and time.monotonic() < deadline, job.output()
            time.sleep(0.05)
        if how == "sigkill":
            os.kill(_rank_pid(f"output.name={name}", job.pid, 0), signal.SIGKILL)
        else:
            metrics.rename(run / "metrics.kept")
            metrics.mkdir()  # the server's next append fails: WriteError on rank 0
        code = job.wait(timeout=60)  # the job ends instead of hanging
    finally:
        job.kill()
    output = job.output()
    assert code != 0
    failure = read_json_object(run / FAILURE_FILE)
    assert failure["rank"] == 0, failure
    said = _last_words(output)
    assert len(said) == 1, output
    if how == "sigkill":
        assert said[0] == f"fedsheaf: rank 0 (the server) {failure['error']}"
        assert failure["error"].startswith("ended without a word: killed by a signal")
        assert failure["error"].endswith(f"; to continue the run: fedsheaf run --resume {run}")
    else:
        assert said[0] == (
            f"fedsheaf: error on rank 0 (the server): cannot write {metrics}: Is a directory"
        )
        assert failure["error"] == f"cannot write {metrics}: Is a directory"
    assert "terminated by SIGTERM" not in output and "Traceback" not in output


def test_a_stopped_rank_ends_the_job_within_the_step_timeout(tmp_path):
    """SIGSTOP to one rank of a decentralized run (as the operating system may stop a
    process): its neighbours would wait in their exchange for ever. With
    train.step_timeout=3 the job ends within seconds, one line and failed.json naming the
    stopped rank; its last checkpoint stays intact."""
    name = f"stopped-{uuid.uuid4().hex[:12]}"
    run = tmp_path / name
    args = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    args += [f"output.name={name}", "train.epochs=500", "train.steps_per_epoch=2"]
    args += ["train.step_timeout=3", "checkpoint.every=1"]
    job = BackgroundMpi(4, args, tmp_path / "out.txt")
    try:
        deadline = time.monotonic() + 180
        while (checkpoint.latest(run, 4) or checkpoint.Checkpoint(run, 0, 4)).epoch < 2:
            assert job.poll() is None and time.monotonic() < deadline, job.output()
            time.sleep(0.05)
        os.kill(_rank_pid(f"output.name={name}", job.pid, 2), signal.SIGSTOP)
        stopped = time.monotonic()
        code = job.wait(timeout=90)
        took = time.monotonic() - stopped
    finally:
        job.kill()  # (SIGKILL ends a stopped process too)
    output = job.output()
    assert code != 0, output
    assert took < 45, f"the job took {took:.0f} s to end"
    failure = json.loads((run / "failed.json").read_text())
    assert failure["rank"] == 2, failure
    assert failure["error"].startswith(
        "does not answer (its process is stopped: SIGSTOP, or a debugger): the job made no "
        "progress for "
    )
    assert "(train.step_timeout=3), so the job was ended" in failure["error"]
    assert _last_words(output) == [f"fedsheaf: rank 2 {failure['error']}"], output
    _assert_intact(run, 2)


#: A job of 3 in which rank 1 vanishes (``sigkill``) or leaves on purpose (``leaves``)
#: while the others wait in Python (argv: the run directory, how).
VANISHING = """
import os, signal, sys, time
from pathlib import Path
from fedsheaf.rundir.lifecycle import follow_run_dir
from fedsheaf.runtime import world
w = world.init_world("cpu")
run, how = Path(sys.argv[1]), sys.argv[2]
w.barrier()
follow_run_dir(run)
if w.rank == 1:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    world.leaving()
    os._exit(0)
deadline = time.monotonic() + (30 if how == "sigkill" else 3)
while time.monotonic() < deadline and not (run / "failed.json").exists():
    time.sleep(0.05)
print(f"rank {w.rank} done", flush=True)
world.leaving()
os._exit(0)
"""


@pytest.mark.parametrize("how", ["sigkill", "leaves"])
def test_a_vanished_rank_is_named_at_once_and_one_that_leaves_is_not(tmp_path, how):
    """No signal prompts the note: the launcher lets the job go on when a rank dies (Open
    MPI's recoverable jobs), so the survivors run on. Rank 1 SIGKILLed: a rank of its node
    names it in failed.json and one line within seconds (before, ranks named a vanished
    rank only when the launcher's SIGTERM came, and here none comes). Rank 1 leaving on
    purpose before the others (its job done): nobody names it."""
    env = mpi_env(PRTE_MCA_state_base_recoverable="1")
    proc = run_mpi(3, ["-c", VANISHING, str(tmp_path), how], env=env, timeout=120)
    said = _last_words(proc.stdout + proc.stderr)
    assert sorted(ln for ln in proc.stdout.splitlines() if ln.endswith("done")) == [
        "rank 0 done",
        "rank 2 done",
    ], proc.stdout + proc.stderr
    if how == "leaves":
        assert not (tmp_path / "failed.json").exists() and said == [], proc.stderr
        return
    failure = json.loads((tmp_path / "failed.json").read_text())
    assert failure["rank"] == 1, failure
    assert re.fullmatch(
        r"ended without a word: killed by a signal \(SIGKILL, out of memory\) or a crash "
        r"outside Python, the launcher's message says which; rank [02] of its node saw it "
        r"end, the launcher ends the job; to continue the run: fedsheaf run --resume "
        + re.escape(str(tmp_path)),
        failure["error"],
    ), failure
    assert said == [f"fedsheaf: rank 1 {failure['error']}"], proc.stderr
