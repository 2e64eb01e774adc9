"""SIGUSR1 (SLURM's warning before a time limit) stops a run at the next epoch (round)
end with a checkpoint, on real ranks: a planned stop that reads as one (every rank exits
0, so mpiexec prints no crash banner; stopped.json and FEDSHEAF_STOPPED_FILE say it), the
checkpoint of that epoch although none was due, and a resume that continues as if nothing
had happened.

The signal goes to one rank only: the ranks decide together (an OR over the job).

Launches are few (each costs every rank its imports on a 2-core machine): what follows a
stop (a refused resume, the resume, the uninterrupted reference run) runs in one job, the
``fedsheaf run`` command lines one after another in each rank's process (:data:`RUNS`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import STOP_FILE, read_json_object
from tests.conftest import BackgroundMpi, mpi_env, run_mpi, untimed
from tests.mpi.test_failures import _rank_pids

pytestmark = pytest.mark.mpi

#: ``fedsheaf run`` command lines (argv: a JSON list of them, then a file to watch) one
#: after another in one job: every rank prints each one's exit status, a refusal all ranks
#: agreed on (2) included, and the watched file's SHA-256 after it.
RUNS = """\
import hashlib, json, sys
from pathlib import Path
from fedsheaf.cli.main import main

watched = Path(sys.argv[2])
for step, argv in enumerate(json.loads(sys.argv[1])):
    try:
        code = main(argv)
    except SystemExit as exc:  # a refusal every rank agreed on
        code = exc.code
    digest = hashlib.sha256(watched.read_bytes()).hexdigest()
    print(f"step {step} exit {code} sha {digest}", flush=True)
"""


def _runs(
    n: int, argvs: list[list[str]], watched: Path
) -> tuple[subprocess.CompletedProcess[str], list[tuple[int, str]]]:
    """``argvs`` (``fedsheaf`` command lines) in one job of ``n`` ranks, one after another;
    the job, and each command line's exit status (the same on every rank) with the SHA-256
    of ``watched`` after it."""
    proc = run_mpi(n, ["-c", RUNS, json.dumps(argvs), str(watched)], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = []
    for step in range(len(argvs)):
        said = re.findall(rf"^step {step} exit (\S+) sha (\S+)$", proc.stdout, re.MULTILINE)
        assert len(said) == n and len({code for code, _ in said}) == 1, proc.stdout + proc.stderr
        steps.append((int(said[0][0]), said[0][1]))
    return proc, steps


def _records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _run_and_stop(
    tmp_path: Path, n: int, args: list[str], name: str, run: Path, after: int, env=None
) -> int:
    """``args`` on ``n`` ranks (``name`` on their command lines), stopped by SIGUSR1 to
    one rank once ``after`` records are written; the epoch (round) it stopped after."""
    job = BackgroundMpi(n, args, tmp_path / "stopped.log", env=env)
    try:
        done = _stop_one_rank(job, f"output.name={name}", run, after)
    finally:
        job.kill()
    assert checkpoint.latest(run, n).epoch == done  # written although none was due
    assert not (run / "summary.json").exists()
    unit = "round" if "round" in read_json_object(run / STOP_FILE) else "epoch"
    assert read_json_object(run / STOP_FILE)[unit] == done  # for watch and report
    return done


def _refused(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``fedsheaf: error`` line of a job whose first run was refused (exit 2 on
    every rank, :func:`_runs`), after its rank."""
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedsheaf: error")]
    assert len(said) == 1, proc.stderr
    return said[0].split(": ", 2)[2]


def _stop_one_rank(job: BackgroundMpi, tag: str, run: Path, after: int) -> int:
    """Signal one rank once ``after`` records are written; the epoch the job stopped at."""
    deadline = time.monotonic() + 180
    while len(_records(run)) < after:
        assert job.poll() is None and time.monotonic() < deadline, job.output()
        time.sleep(0.05)
    os.kill(_rank_pids(tag, job.pid)[-1], signal.SIGUSR1)
    # a planned stop, not a crash: Open MPI's banner for a non-zero exit would say
    # "prterun detected that one or more processes exited with non-zero status"
    assert job.wait(timeout=180) == 0, job.output()
    assert "non-zero status" not in job.output() and "terminated" not in job.output()
    said = re.search(r"stopped on SIGUSR1 after (epoch|round) (\d+) of (\d+)", job.output())
    assert said, job.output()
    assert f"fedsheaf run --resume {run}" in job.output()
    return int(said.group(2))


def test_a_decentralized_run_stops_with_a_checkpoint_and_resumes_as_if_uninterrupted(
    tmp_path,
):
    name = f"stop-{uuid.uuid4().hex[:12]}"  # unique command line, to find the ranks
    run = tmp_path / name
    common = ["configs/quickstart.yaml", f"output.dir={tmp_path}", "train.steps_per_epoch=2"]
    common += ["checkpoint.every=1000", "train.eval_every=2"]  # no checkpoint is ever due
    args = ["-m", "fedsheaf", "run", *common, f"output.name={name}", "train.epochs=500"]
    note = tmp_path / "job-42.stopped"  # what a batch script asks for
    env = {**mpi_env(), "FEDSHEAF_STOPPED_FILE": str(note)}
    done = _run_and_stop(tmp_path, 4, args, name, run, after=2, env=env)
    assert json.loads(note.read_text()) == {"run_dir": str(run), "epoch": done}
    assert done >= 2 and len(_records(run)) == done

    longer = done + 2  # an evaluated epoch after the resume, and the last
    resume = ["run", "--resume", str(run), f"train.epochs={longer}"]
    straight = ["run", *common, "output.name=straight", f"train.epochs={longer}"]
    # the resume, and the uninterrupted run, in one job
    resumed, steps = _runs(4, [resume, straight], run / "metrics.jsonl")
    assert [code for code, _ in steps] == [0, 0], resumed.stdout + resumed.stderr
    assert f"resuming {run} after epoch {done}" in resumed.stdout
    assert not (run / STOP_FILE).exists()
    assert untimed(_records(run)) == untimed(_records(tmp_path / "straight"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epoch"] == longer


def test_without_checkpoints_every_rank_ignores_the_signal_and_one_says_so(tmp_path):
    name = f"ignore-{uuid.uuid4().hex[:12]}"
    run = tmp_path / name
    args = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    # (long enough for the signal to come well before the last epoch)
    args += [f"output.name={name}", "train.steps_per_epoch=2", "train.epochs=40"]
    args += ["checkpoint.every=0", "train.eval_every=1000"]
    job = BackgroundMpi(4, args, tmp_path / "ignored.log")
    try:
        deadline = time.monotonic() + 180
        while not _records(run):
            assert job.poll() is None and time.monotonic() < deadline, job.output()
            time.sleep(0.05)
        ranks = _rank_pids(f"output.name={name}", job.pid)
        assert len(ranks) == 4
        for pid in ranks:  # as SLURM's --signal does: every task
            os.kill(pid, signal.SIGUSR1)
        assert job.wait(timeout=180) == 0, job.output()
    finally:
        job.kill()
    assert job.output().count("SIGUSR1 ignored: this run writes no checkpoints") == 1
    assert json.loads((run / "summary.json").read_text())["epoch"] == 40
    assert not (run / STOP_FILE).exists()


def test_a_signal_in_the_last_epoch_lets_the_run_finish_and_says_so(tmp_path):
    """The run used to finish without a word, as if the request had been lost."""
    import subprocess
    import sys

    import yaml

    graph = tmp_path / "one.yaml"
    graph.write_text(yaml.safe_dump({"name": "one", "nodes": [{"id": 0, "dim": 6}], "edges": []}))
    config = tmp_path / "one-epoch.yaml"
    agent = {"encoder": [4, 6], "head": [8], "classes": [0, 1, 2]}
    config.write_text(
        yaml.safe_dump(
            {
                "name": "last",
                "graph": str(graph),
                "agents": [agent],
                "train": {"epochs": 1, "steps_per_epoch": 400},  # seconds long
                "sheaf": {"pilot_batch": 8},
                "data": {"limit": 400},
                "output": {"dir": str(tmp_path / "runs")},
            }
        )
    )
    run = tmp_path / "runs" / "last-sheaf_frl-seed0"
    job = subprocess.Popen(  # one rank, no launcher: an MPI singleton
        [sys.executable, "-m", "fedsheaf", "run", str(config)],
        env=mpi_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "config.yaml").exists():  # written before training starts
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        job.send_signal(signal.SIGUSR1)
        out, _ = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 0, out
    assert "fedsheaf: SIGUSR1 in the last epoch: the run finishes instead of stopping" in out
    assert (run / "summary.json").is_file() and not (run / STOP_FILE).exists()


def test_a_server_based_run_stops_after_a_round(tmp_path, fmnist_root):
    from tests.mpi.test_resume_server import _config, _fedrep

    cfg = _fedrep(fmnist_root)
    cfg["federated"]["rounds"] = 400
    cfg["checkpoint"] = {"every": 1000}
    name = f"stop-{uuid.uuid4().hex[:12]}"
    run = tmp_path / "runs" / name
    cfg["federated"].update(eval_every=1000, eval_last=2)  # scored: the last 2 rounds only
    path = _config(tmp_path, cfg)
    args = ["-m", "fedsheaf", "run", str(path), f"output.name={name}"]
    done = _run_and_stop(tmp_path, 3, args, name, run, after=1)
    # ending one round later would score round `done`, trained without an evaluation
    kept = hashlib.sha256((run / "metrics.jsonl").read_bytes()).hexdigest()
    resume = ["run", "--resume", str(run)]
    # refused, then resumed, in one job (the ranks refused are not left waiting)
    argvs = [[*resume, f"federated.rounds={n}"] for n in (done + 1, done + 2)]
    resumed, steps = _runs(3, argvs, run / "metrics.jsonl")
    assert steps[0] == (2, kept), resumed.stderr  # refused: the metrics as they were
    assert _refused(resumed) == (
        f"cannot end {run} after round {done + 1}: a run of that length evaluates its "
        f"last 2 rounds (federated.eval_last), and round {done} among them was trained "
        f"without an evaluation (the run was longer then); resume with federated.rounds >= "
        f"{done + 2}"
    )
    assert steps[1][0] == 0, resumed.stderr
    assert f"after round {done}" in resumed.stdout
    assert not (run / STOP_FILE).exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == done + 2 and summary["score_rounds"] == [done + 1, done + 2]
    scored = [r["acc"] for r in _records(run) if r["round"] > done and not r["final"]]
    assert len(scored) == 2 and summary["acc_last"] == pytest.approx(sum(scored) / 2)


def test_a_hub_run_stops_with_its_server(tmp_path):
    """FedProto: three agents and a server rank, the server's state in the checkpoint."""
    from tests.mpi.test_variants_hub import _write

    config = _write(tmp_path)
    name = f"stop-{uuid.uuid4().hex[:12]}"
    run = tmp_path / "runs" / name
    args = ["-m", "fedsheaf", "run", str(config), "algorithm=fedproto", f"output.name={name}"]
    args += ["train.epochs=400", "checkpoint.every=1000", "train.eval_every=1000"]
    done = _run_and_stop(tmp_path, 4, args, name, run, after=1)
    # ended where it stopped, it would report no accuracy: refused, the server not left waiting
    kept = hashlib.sha256((run / "metrics.jsonl").read_bytes()).hexdigest()
    resume = ["run", "--resume", str(run)]
    argvs = [[*resume, f"train.epochs={n}"] for n in (done, done + 1)]  # in one job
    resumed, steps = _runs(4, argvs, run / "metrics.jsonl")
    assert steps[0] == (2, kept), resumed.stderr  # refused: the metrics as they were
    assert _refused(resumed) == (
        f"cannot end {run} at epoch {done}: its checkpoint there was taken "
        f"without an evaluation (epoch {done} was not its last), so its summary would hold "
        f"none; resume with train.epochs greater than {done}"
    )
    # the server not left waiting: the resume in the same processes runs
    assert steps[1][0] == 0, resumed.stderr
    assert json.loads((run / "summary.json").read_text())["epoch"] == done + 1
    assert not (run / STOP_FILE).exists()


def test_sigterm_to_the_ranks_ends_the_job_saying_so(tmp_path):
    """A cancelled job (scancel signals every task; mpiexec, stopped, signals its ranks)
    ends without a new checkpoint, but not silently: one rank says so (on standard error
    and in failed.json, which ends ``fedsheaf watch``), and the run continues from its
    last checkpoint. (SIGINT takes the same handler; to mpiexec itself, Open MPI kills
    the ranks too soon after for their line to get out: tests/unit/test_processes.py
    covers what stops a launcher.)"""
    from fedsheaf.ops.watch import watch
    from fedsheaf.rundir.files import FAILURE_FILE

    name = f"term-{uuid.uuid4().hex[:12]}"
    run = tmp_path / name
    args = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    args += [f"output.name={name}", "train.steps_per_epoch=2", "train.epochs=500"]
    job = BackgroundMpi(4, [*args, "train.eval_every=1000"], tmp_path / "term.log")
    try:
        deadline = time.monotonic() + 180
        while len(_records(run)) < 2:
            assert job.poll() is None and time.monotonic() < deadline, job.output()
            time.sleep(0.05)
        for pid in _rank_pids(f"output.name={name}", job.pid):
            os.kill(pid, signal.SIGTERM)
        assert job.wait(timeout=60) != 0, job.output()
    finally:
        job.kill()
    failure = read_json_object(run / FAILURE_FILE)
    said = (
        "terminated by SIGTERM (the job was cancelled, its launcher stopped, or a rank on "
        "another node died)"
    )
    assert failure["error"] == f"{said}; to continue the run: fedsheaf run --resume {run}"
    output = job.output()
    assert output.count(f"fedsheaf: rank {failure['rank']} {said}") == 1, output
    assert "Traceback" not in output
    out = io.StringIO()
    assert watch(run, once=True, out=out) == 1
    assert (
        out.getvalue().splitlines()[-1]
        == f"failed on rank {failure['rank']}: " + (failure["error"])
    )
