"""Checkpoint/resume of server-based runs on real ranks: bitwise equal results.

Two runs of the family are checked: FedRep (private heads on the workers) and
head-only FedAvg (the server also carries the Gram recursion across rounds).

A reference run of 6 rounds without checkpoints, a run of 6 rounds checkpointing every 3
and a finished run of 3 rounds start together. The second is then turned into what a
job killed during round 5 leaves behind: its manifest names round 3 only (round 6's rank
files stay on disk, uncommitted), metrics.jsonl still holds the later records and there
is no summary. Resuming it must rewrite metrics.jsonl and end exactly as the reference
(timings aside). The finished run of 3 rounds, trained longer to 6 (launched together
with that resume), must end exactly as the reference too.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import MPIEXEC, BackgroundMpi, run_mpi, untimed

pytestmark = pytest.mark.mpi
ROUNDS, CUT, NP = 6, 3, 3


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


def _run_together(tmp_path: Path, *runs: list[str]) -> None:
    """``fedsheaf run ARGS`` for each ARGS, all at once on NP ranks each; all must succeed
    (startup dominates these runs on 2 cores)."""
    jobs = [
        BackgroundMpi(NP, ["-m", "fedsheaf", "run", *args], tmp_path / f"together-{i}.log")
        for i, args in enumerate(runs)
    ]
    try:
        for job in jobs:
            assert job.wait(timeout=240) == 0, job.output()
    finally:
        for job in jobs:
            job.kill()


@pytest.mark.parametrize("make", [_fedrep, _head_fedavg], ids=["fedrep", "head_fedavg"])
def test_resumed_server_run_matches_an_uninterrupted_one(tmp_path, fmnist_root, make):
    """A run killed after its round-3 checkpoint and resumed, and a finished run of 3
    rounds trained longer to 6, each end exactly as a run of 6 rounds (timings aside).

    FedRep ends with a fine-tuning round after its last one: the checkpoint of the last
    round is taken before it, so a finished run continues as if it had been asked for
    more; head_fedavg's server carries its Gram recursion across the extension."""
    if not MPIEXEC.exists():
        pytest.skip(f"mpiexec not found at {MPIEXEC}")
    cfg = _config(tmp_path, make(fmnist_root))
    runs = tmp_path / "runs"
    _run_together(
        tmp_path,
        [str(cfg), "output.name=ref", "checkpoint.every=0"],
        [str(cfg), "output.name=cut", f"checkpoint.every={CUT}"],
        [str(cfg), "output.name=short", f"federated.rounds={CUT}", f"checkpoint.every={CUT}"],
    )
    ref, cut, short = runs / "ref", runs / "cut", runs / "short"
    assert not (ref / "checkpoints").exists()
    reference = untimed(read_metrics(ref / "metrics.jsonl"))
    ref_summary = untimed(json.loads((ref / "summary.json").read_text()))
    assert untimed(read_metrics(cut / "metrics.jsonl")) == reference  # saving changes nothing
    final_round = int(reference[-1]["final"])  # FedRep's head round after the last one
    assert [r["round"] for r in reference] == list(range(1, ROUNDS + 1 + final_round))

    # what a kill during round 5 leaves: round 3 committed, round 6 files not yet named
    (cut / "summary.json").unlink()
    checkpoint.commit(cut, CUT, NP)
    assert checkpoint.latest(cut, NP).epoch == CUT
    assert (checkpoint.epoch_dir(cut, ROUNDS) / "rank-0.pt").is_file()

    # the resume and the extension of the finished short run, launched together
    with ThreadPoolExecutor(2) as pool:
        resumed, extended = pool.map(
            lambda args: run_mpi(NP, ["-m", "fedsheaf", "run", "--resume", *args], timeout=240),
            [[str(cut)], [str(short), f"rounds={ROUNDS}"]],
        )
    proc = resumed
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {cut} after round {CUT}" in proc.stdout
    assert "round    1/" not in proc.stdout and f"round    {CUT + 1}/{ROUNDS}" in proc.stdout
    assert untimed(read_metrics(cut / "metrics.jsonl")) == reference
    summary = json.loads((cut / "summary.json").read_text())
    assert untimed(summary) == ref_summary
    kept = sorted(p.name for p in checkpoint.checkpoints_dir(cut).glob("epoch-*"))
    assert kept == [f"epoch-{CUT:04d}", f"epoch-{ROUNDS:04d}"]
    # the wall time counts the first launch up to round 3 too (the server's checkpoint)
    before = checkpoint.load_rank(checkpoint.Checkpoint(cut, CUT, NP), 0)["wall_seconds"]
    assert 0 < before < summary["wall_seconds"] and "s in all, " in proc.stdout

    # the finished run of 3 rounds trained longer: as if it had been asked for 6
    proc = extended
    assert proc.returncode == 0, proc.stderr
    assert f"extending the finished run {short} from {CUT} to {ROUNDS} rounds" in proc.stdout
    assert f"resuming {short} after round {CUT}" in proc.stdout
    assert untimed(read_metrics(short / "metrics.jsonl")) == reference
    assert untimed(json.loads((short / "summary.json").read_text())) == ref_summary
