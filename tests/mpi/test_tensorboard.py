"""``output.tensorboard=true`` on real ranks: the events, read back with TensorBoard's own
reader, hold every epoch (round) once with metrics.jsonl's numbers, across a resume; a job
without the package is refused before it trains. Each run and its resume share one launch
(tests/conftest.py's run_mpi_batch), to keep the file fast on a 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir.files import read_metrics
from tests.conftest import run_mpi, run_mpi_batch

pytestmark = pytest.mark.mpi


def read_events(run: Path) -> tuple[dict[str, list[tuple[int, float]]], list[str]]:
    """(tag -> (step, value) of every scalar TensorBoard shows for ``run``, tensor tags)."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(run / "tb"))
    acc.Reload()
    tags = acc.Tags()
    return {t: [(s.step, s.value) for s in acc.Scalars(t)] for t in tags["scalars"]}, tags[
        "tensors"
    ]


def _same(events: list[tuple[int, float]], steps: list[int], values: list[float]) -> None:
    assert [s for s, _ in events] == steps
    assert [v for _, v in events] == pytest.approx(values, rel=1e-6)  # (stored as float32)


def test_a_resumed_decentralized_run_has_every_epoch_once(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "board"
    first = ["configs/quickstart.yaml", "train.steps_per_epoch=2", "train.epochs=2"]
    first += [f"output.dir={tmp_path}", "output.name=board", "output.tensorboard=true"]
    # the run and its resume, one after the other in one launch
    procs = run_mpi_batch(
        4, [["run", *first], ["run", "--resume", str(run), "train.epochs=4"]], tmp_path / "job"
    )
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    # what the evaluation sent is said apart from the training traffic
    assert " training + " in procs[0].stdout and " evaluation  private " in procs[0].stdout
    assert (run / "tb").is_dir()

    events, tensors = read_events(run)
    records = read_metrics(run / "metrics.jsonl")
    epochs = [1, 2, 3, 4]
    assert [r["epoch"] for r in records] == epochs
    for tag, key in (
        ("loss", "loss"),
        ("accuracy/private", "private_acc"),
        ("accuracy/comm", "comm_acc"),
        ("accuracy/comm_degree_weighted", "comm_acc_deg"),
        ("bytes/sent", "bytes_sent"),
        ("bytes/eval_sent", "eval_bytes_sent"),
        ("time/seconds", "seconds"),
    ):
        _same(events[tag], epochs, [r[key] for r in records])
    for agent in range(4):
        mine = [next(a for a in r["agents"] if a["agent"] == agent) for r in records]
        _same(events[f"agents/private/{agent}"], epochs, [a["private_acc"] for a in mine])
    assert "custom_scalars__config__" in tensors  # the per-agent charts' layout


def test_a_resumed_server_run_has_every_round_once(tmp_path, fmnist_root):
    pytest.importorskip("tensorboard")
    cfg = {
        "name": "board",
        "algorithm": "fedrep",
        "seed": 3,
        "data": {"dataset": "fashionmnist", "root": str(fmnist_root), "limit": 600},
        "train": {"batch_size": 10, "lr": 0.01, "momentum": 0.5, "clip": None},
        "federated": {
            "clients": 5,
            "classes_per_client": 2,
            "train_per_client": 20,
            "test_per_client": 10,
            "rounds": 2,
            "fraction": 0.5,
            "head_epochs": 1,
            "body_epochs": 1,
            "finetune_epochs": 1,
            "eval_every": 1,
            "eval_last": 1,
        },
        "output": {"dir": str(tmp_path), "name": "board", "tensorboard": True},
    }
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "board"
    # the run and its resume, one after the other in one launch
    runs = [["run", str(config)], ["run", "--resume", str(run), "federated.rounds=3"]]
    for proc in run_mpi_batch(3, runs, tmp_path / "job"):
        assert proc.returncode == 0, proc.stderr

    events, _ = read_events(run)
    records = read_metrics(run / "metrics.jsonl")
    rounds = [r for r in records if not r["final"]]
    (final,) = [r for r in records if r["final"]]
    assert [r["round"] for r in rounds] == [1, 2, 3] and final["round"] == 4
    for tag, key in (("loss", "loss"), ("accuracy/mean", "acc"), ("bytes/up", "bytes_up")):
        _same(events[tag], [1, 2, 3], [r[key] for r in rounds])
    # the shorter run's fine-tuning round (at 3) is gone: only the new one, at 4
    _same(events["after_fine_tuning/accuracy/mean"], [4], [final["acc"]])
    _same(events["clients/accuracy/2"], [1, 2, 3], [r["client_acc"][2] for r in rounds])


def test_a_job_without_the_package_is_refused_before_it_trains(tmp_path):
    code = (
        "import sys, runpy; sys.modules['tensorboard'] = None; "  # as where it is not installed
        "sys.argv = ['fedsheaf', *sys.argv[1:]]; runpy.run_module('fedsheaf', run_name='__main__')"
    )
    args = ["-c", code, "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    proc = run_mpi(4, [*args, "output.tensorboard=true"])
    assert proc.returncode != 0
    said = [ln for ln in proc.stderr.splitlines() if "tensorboard" in ln]
    assert len(said) == 1 and "pip install 'fedsheaf[tensorboard]'" in said[0], proc.stderr
    assert "epoch" not in proc.stdout and not any(tmp_path.rglob("metrics.jsonl"))
