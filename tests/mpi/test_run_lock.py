"""One job per run directory, on real ranks: a second job started on a run that is still
training (a resume, an overwrite) is refused with one message and changes nothing; once
the first job is gone, however it ended, its lock is gone too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir.files import read_metrics
from fedsheaf.rundir.run_lock import LOCK_FILE
from tests.conftest import BackgroundMpi, run_mpi

pytestmark = pytest.mark.mpi
REFUSAL = "is in use by another job"


def _config(tmp_path: Path) -> Path:
    graph = {"name": "pair", "nodes": [{"id": 0, "dim": 6}, {"id": 1, "dim": 8}], "edges": [[0, 1]]}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(graph))
    agents = [
        {"encoder": [8, d], "head": [8], "classes": [c, c + 1, c + 2]} for c, d in ((0, 6), (5, 8))
    ]
    config = {
        "name": "pair",
        "graph": str(tmp_path / "g.yaml"),
        "agents": agents,
        "output": {"dir": str(tmp_path / "runs")},
        "sheaf": {"pilot_batch": 8},
        "train": {"steps_per_epoch": 1, "eval_every": 100000},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "c.yaml"


def test_a_second_job_on_a_training_run_is_refused_and_the_lock_dies_with_its_job(tmp_path):
    config = _config(tmp_path)
    run = tmp_path / "runs" / "pair-sheaf_frl-seed0"
    first = BackgroundMpi(
        2, ["-m", "fedsheaf", "run", str(config), "train.epochs=100000"], tmp_path / "first.log"
    )
    try:
        deadline = time.monotonic() + 150
        while not (run / "checkpoints" / "latest.json").is_file():
            assert first.poll() is None, first.output()
            assert time.monotonic() < deadline, "the first job wrote no checkpoint"
            time.sleep(0.05)
        holder = (run / LOCK_FILE).read_text().strip()  # the first job's writing rank
        assert holder.startswith("pid ") and ", since " in holder, holder
        for extra in (["--resume", str(run)], [str(config), "output.overwrite=true"]):
            second = run_mpi(2, ["-m", "fedsheaf", "run", *extra])
            assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
            assert second.stderr.count(REFUSAL) == 1 and f"({holder})" in second.stderr
            assert first.poll() is None, first.output()  # the first job trains on
        assert (run / "metrics.jsonl").is_file() and (run / "checkpoints").is_dir()
    finally:
        first.kill()  # as a preemption ends a job: no chance to let go of anything
    epochs = [r["epoch"] for r in read_metrics(run / "metrics.jsonl")]
    assert epochs == list(range(1, len(epochs) + 1))  # one writer: no epoch twice
    again = run_mpi(2, ["-m", "fedsheaf", "run", str(config), "output.overwrite=true"])
    assert again.returncode == 0, again.stderr
    assert (run / "summary.json").is_file()
