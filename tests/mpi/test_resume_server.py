"""Checkpoint/resume of server-based runs on real ranks: bitwise equal results.

Two runs of the family are checked: FedRep (private heads on the workers) and
head-only FedAvg (the server also carries the Gram recursion across rounds).

A reference run of 4 rounds without checkpoints, a run of 4 rounds checkpointing every 2
and a finished run of 2 rounds run first. The second is then turned into what a job
killed during round 3 leaves behind: its manifest names round 2 only (round 4's rank
files stay on disk, uncommitted), metrics.jsonl still holds the later records and there
is no summary. Resuming it must rewrite metrics.jsonl and end exactly as the reference
(timings aside). The finished run of 2 rounds, trained longer to 4, must end exactly as
the reference too.

Both algorithms' runs share two launches of 3 ranks (a module fixture: the first runs,
then the resumes and extensions; several ``fedsheaf run`` in one job,
tests/conftest.py's run_mpi_batch), to keep the file fast on a 2-core machine.
"""

from __future__ import annotations

import json

import pytest
import yaml

from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import MPIEXEC, run_mpi_batch, shared_data_root, untimed

pytestmark = pytest.mark.mpi
ROUNDS, CUT, NP = 4, 2, 3


def _fedrep(root):
    return {
        "name": "resume",
        "algorithm": "fedrep",
        "seed": 3,
        "data": {"dataset": "fashionmnist", "root": str(root), "limit": 1200},
        "train": {"batch_size": 10, "lr": 0.01, "momentum": 0.5, "clip": None},
        "federated": {
            "clients": 5,
            "classes_per_client": 2,
            "train_per_client": 40,
            "test_per_client": 20,
            "rounds": ROUNDS,
            "fraction": 0.5,
            "head_epochs": 1,
            "body_epochs": 1,
            "finetune_epochs": 1,
            "eval_every": 1,
        },
    }


def _head_fedavg(root):
    return {
        "name": "resume",
        "algorithm": "head_fedavg",
        "seed": 1,
        "federated": {
            "clients": 4,
            "rounds": ROUNDS,
            "fraction": 0.5,
            "local_epochs": 3,
            "eval_every": 1,
        },
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "batch_size": 32},
        "head": {
            "data": "diabetes3",
            "backbone": [8],
            "features": 4,
            "rho": 1.0e-3,
            "align": True,
            "moment_gamma": 0.5,
        },
    }


def _config(tmp_path, cfg):
    cfg["output"] = {"dir": str(tmp_path / "runs")}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


MAKERS = {"fedrep": _fedrep, "head_fedavg": _head_fedavg}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both algorithms' runs in two launches of NP ranks (startup dominates these runs on
    2 cores): the reference, cut and short runs; then the resume of the cut run and the
    extension of the short one. Per algorithm: its folder, what the cut run held before it
    was turned into a killed one, and each launch's result."""
    root = shared_data_root()
    if root is None:
        pytest.skip("no shared FashionMNIST copy (../shared/data) on this machine")
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    work = tmp_path_factory.mktemp("resume_server")
    found: dict[str, dict] = {}
    first = []
    for name, make in MAKERS.items():
        (work / name).mkdir()
        cfg = str(_config(work / name, make(root)))
        first += [
            ["run", cfg, "output.name=ref", "checkpoint.every=0"],
            ["run", cfg, "output.name=cut", f"checkpoint.every={CUT}"],
            ["run", cfg, "output.name=short", f"federated.rounds={CUT}", f"checkpoint.every={CUT}"],
        ]
    for proc in run_mpi_batch(NP, first, work, timeout=600):
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    second = []
    for name in MAKERS:
        runs = work / name / "runs"
        cut = runs / "cut"
        found[name] = {
            "runs": runs,
            "ref_checkpoints": (runs / "ref" / "checkpoints").exists(),
            "cut_metrics": untimed(read_metrics(cut / "metrics.jsonl")),
        }
        # what a kill during round CUT + 2 leaves: round CUT committed, round ROUNDS's
        # files not yet named
        (cut / "summary.json").unlink()
        checkpoint.commit(cut, CUT, NP)
        found[name]["latest"] = checkpoint.latest(cut, NP).epoch
        found[name]["left"] = (checkpoint.epoch_dir(cut, ROUNDS) / "rank-0.pt").is_file()
        second += [
            ["run", "--resume", str(cut)],
            ["run", "--resume", str(runs / "short"), f"rounds={ROUNDS}"],
        ]
    procs = iter(run_mpi_batch(NP, second, work, timeout=600))
    for name in MAKERS:
        found[name]["resumed"], found[name]["extended"] = next(procs), next(procs)
    return found


@pytest.mark.parametrize("name", list(MAKERS))
def test_resumed_server_run_matches_an_uninterrupted_one(jobs, name):
    """A run killed after its round-CUT checkpoint and resumed, and a finished run of CUT
    rounds trained longer to ROUNDS, each end exactly as a run of ROUNDS rounds (timings
    aside).

    FedRep ends with a fine-tuning round after its last one: the checkpoint of the last
    round is taken before it, so a finished run continues as if it had been asked for
    more; head_fedavg's server carries its Gram recursion across the extension."""
    job = jobs[name]
    runs = job["runs"]
    ref, cut, short = runs / "ref", runs / "cut", runs / "short"
    assert not job["ref_checkpoints"]
    reference = untimed(read_metrics(ref / "metrics.jsonl"))
    ref_summary = untimed(json.loads((ref / "summary.json").read_text()))
    assert job["cut_metrics"] == reference  # saving changes nothing
    final_round = int(reference[-1]["final"])  # FedRep's head round after the last one
    assert [r["round"] for r in reference] == list(range(1, ROUNDS + 1 + final_round))

    # what a kill during round CUT + 2 left: round CUT committed, round ROUNDS's files on disk
    assert job["latest"] == CUT and job["left"]

    proc = job["resumed"]
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {cut} after round {CUT}" in proc.stdout
    assert "round    1/" not in proc.stdout and f"round    {CUT + 1}/{ROUNDS}" in proc.stdout
    assert untimed(read_metrics(cut / "metrics.jsonl")) == reference
    summary = json.loads((cut / "summary.json").read_text())
    assert untimed(summary) == ref_summary
    kept = sorted(p.name for p in checkpoint.checkpoints_dir(cut).glob("epoch-*"))
    assert kept == [f"epoch-{CUT:04d}", f"epoch-{ROUNDS:04d}"]
    # the wall time counts the first launch up to round CUT too (the server's checkpoint)
    before = checkpoint.load_rank(checkpoint.Checkpoint(cut, CUT, NP), 0)["wall_seconds"]
    assert 0 < before < summary["wall_seconds"] and "s in all, " in proc.stdout

    # the finished run of CUT rounds trained longer: as if it had been asked for ROUNDS
    proc = job["extended"]
    assert proc.returncode == 0, proc.stderr
    assert f"extending the finished run {short} from {CUT} to {ROUNDS} rounds" in proc.stdout
    assert f"resuming {short} after round {CUT}" in proc.stdout
    assert untimed(read_metrics(short / "metrics.jsonl")) == reference
    assert untimed(json.loads((short / "summary.json").read_text())) == ref_summary
