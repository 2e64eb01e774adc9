"""FedProto and FedMuscle on real ranks: three agents on a graph plus a server rank.

One launch (4 ranks) runs both through ``fedsheaf.runtime.hub.run_hub``; a second,
short one checks the error for a job without the server rank.
Run as a script under mpiexec it is the worker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.mpi

D, K, STEPS, CLASSES = 16, 12, 2, 10


def worker(workdir: Path) -> None:
    from fedsheaf.config import load_config
    from fedsheaf.runtime.hub import run_hub
    from fedsheaf.runtime.world import init_world

    world = init_world()
    out = {}
    for name, overrides in {
        "fedproto": ["algorithm=fedproto"],
        "fedmuscle": [
            "algorithm=fedmuscle",
            "baseline.fedmuscle.task_epochs=1",
            "baseline.fedmuscle.align_epochs=1",
        ],
    }.items():
        cfg = load_config(workdir / "hub.yaml", [*overrides, f"output.name={name}"])
        summary = run_hub(cfg, world)
        if world.rank == 1:  # agent 0 writes the run directory and holds the summary
            out[name] = summary
    if world.rank == 1:
        (workdir / "results.json").write_text(json.dumps(out, default=float))
    world.barrier()


def _write(workdir: Path) -> Path:
    nodes = [{"id": i, "dim": D} for i in range(3)]
    (workdir / "g.yaml").write_text(
        yaml.safe_dump({"name": "tri", "nodes": nodes, "edges": [[0, 1], [1, 2], [0, 2]]})
    )
    classes = [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [5, 6, 7, 8, 9]]
    cfg = {
        "name": "hub",
        "seed": 2,
        "graph": str(workdir / "g.yaml"),
        "data": {"dataset": "digits", "shift": 0.5},
        "agents": [{"encoder": [8, D], "head": [16], "classes": c} for c in classes],
        "train": {"epochs": 2, "steps_per_epoch": STEPS, "batch_size": 32, "lr": 0.05},
        "sheaf": {"lam": 0.5, "pilot_batch": K},
        "checkpoint": {"every": 0},
        "output": {"dir": str(workdir / "runs")},
    }
    (workdir / "hub.yaml").write_text(yaml.safe_dump(cfg))
    return workdir / "hub.yaml"


def test_fedproto_and_fedmuscle_with_a_server_rank(tmp_path):
    from tests.conftest import run_mpi

    _write(tmp_path)
    proc = run_mpi(4, [str(Path(__file__).resolve()), str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    for name in ("fedproto", "fedmuscle"):
        s = res[name]
        assert len(s["agents"]) == 3 and 0 <= s["comm_acc"] <= 1 and 0 <= s["private_acc"] <= 1
        assert (tmp_path / "runs" / name / "summary.json").is_file()
    # per agent: class sums + counts (C x (D+1) float32) once per epoch
    assert all(
        a["server_bytes_sent"] == 2 * CLASSES * (D + 1) * 4 for a in res["fedproto"]["agents"]
    )
    # FedMuscle: epoch 1 is task-only, epoch 2 aligns: K x D pilot latents per step
    assert all(a["server_bytes_sent"] == STEPS * K * D * 4 for a in res["fedmuscle"]["agents"])


def test_a_job_without_the_server_rank_is_refused(tmp_path):
    from tests.conftest import run_mpi

    cfg = _write(tmp_path)
    proc = run_mpi(3, ["-m", "fedsheaf", "run", str(cfg), "algorithm=fedproto"], timeout=120)
    assert proc.returncode == 2
    assert "plus a server rank: launch with mpiexec -n 4" in proc.stderr


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
