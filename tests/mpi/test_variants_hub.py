"""FedProto and FedMuscle on real ranks: three agents on a graph plus a server rank.

One launch (4 ranks) runs both through ``fedsheaf.launch.hub.run_hub``, each once
straight through and once checkpointing after every epoch, killed (as far as its
files tell) in epoch 2 and resumed: the resumed run must end bitwise equal. Two more
4-rank launches check the refused resumes of another model, a third trains a copy of
the finished FedMuscle run longer (``fedsheaf run --resume``, a launch of its own: its
"extending" line is checked on the job's output), and a short 3-rank one the error for
a job without the server rank.
Run as a script under mpiexec it is the worker.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.mpi

D, K, STEPS, CLASSES, EPOCHS, CUT = 16, 12, 2, 10, 3, 1


def worker(workdir: Path) -> None:
    from fedsheaf.config.sections import load_config
    from fedsheaf.launch.hub import run_hub
    from fedsheaf.rundir import checkpoint
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
        cut = [*overrides, f"output.name={name}-cut", "checkpoint.every=1", "checkpoint.keep=3"]
        run_hub(load_config(workdir / "hub.yaml", cut), world)
        run = workdir / "runs" / f"{name}-cut"
        world.barrier()  # agent 0 has written the summary
        if world.rank == 0:  # what a kill in epoch 2 leaves: epoch 1 committed, no summary
            (run / "summary.json").unlink()
            checkpoint.commit(run, CUT, world.size)
        world.barrier()
        run_hub(load_config(workdir / "hub.yaml", [*cut, "checkpoint.resume=true"]), world)
    if world.rank == 1:
        (workdir / "results.json").write_text(json.dumps(out, default=float))


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
        "train": {"epochs": EPOCHS, "steps_per_epoch": STEPS, "batch_size": 32, "lr": 0.05},
        "sheaf": {"lam": 0.5, "pilot_batch": K},
        "checkpoint": {"every": 0},
        "output": {"dir": str(workdir / "runs")},
    }
    (workdir / "hub.yaml").write_text(yaml.safe_dump(cfg))
    return workdir / "hub.yaml"


def test_fedproto_and_fedmuscle_with_a_server_rank_and_resume(tmp_path):
    from fedsheaf.rundir import checkpoint
    from fedsheaf.rundir.files import read_metrics
    from tests.conftest import run_mpi, untimed

    _write(tmp_path)
    proc = run_mpi(4, [str(Path(__file__).resolve()), str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    for name in ("fedproto", "fedmuscle"):
        s = res[name]
        assert len(s["agents"]) == 3 and 0 <= s["comm_acc"] <= 1 and 0 <= s["private_acc"] <= 1
        ref, cut = tmp_path / "runs" / name, tmp_path / "runs" / f"{name}-cut"
        assert f"resuming {cut} after epoch {CUT}" in proc.stdout
        assert [r["epoch"] for r in read_metrics(cut / "metrics.jsonl")] == [1, 2, 3]
        assert untimed(read_metrics(cut / "metrics.jsonl")) == untimed(
            read_metrics(ref / "metrics.jsonl")
        )
        cut_summary = json.loads((cut / "summary.json").read_text())
        assert untimed(cut_summary) == untimed(json.loads((ref / "summary.json").read_text()))
        assert sorted(p.name for p in checkpoint.checkpoints_dir(cut).glob("epoch-*")) == [
            f"epoch-{e:04d}" for e in range(1, EPOCHS + 1)
        ]
        assert {p.name for p in checkpoint.epoch_dir(cut, EPOCHS).iterdir()} == {
            f"rank-{r}.pt"
            for r in range(4)  # the server's file and one per agent
        }
    # resuming another model: refused by rank 0 before any state loads; the server does not hang
    fedproto = tmp_path / "runs" / "fedproto-cut"
    (fedproto / "summary.json").unlink()
    bad = ["-m", "fedsheaf", "run", "--resume", str(fedproto), "agents[0].encoder=[12,16]"]
    proc = run_mpi(4, bad, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "agents[0].encoder ([8, 16] -> [12, 16])" in proc.stderr, proc.stderr
    # without its config.yaml the run cannot be compared: the checkpoint itself does not fit
    (fedproto / "config.yaml").unlink()
    bad = ["-m", "fedsheaf", "run", str(tmp_path / "hub.yaml"), "algorithm=fedproto"]
    bad += ["output.name=fedproto-cut", "checkpoint.resume=true", "agents[0].encoder=[12,16]"]
    proc = run_mpi(4, bad, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("checkpoint does not fit this model/config") == 1, proc.stderr
    assert "error (rank 1): agent 0: checkpoint does not fit" in proc.stderr  # world rank
    assert "Traceback" not in proc.stderr
    assert checkpoint.latest(fedproto, 4).epoch == EPOCHS  # left as it was
    # a finished hub run trained longer (a launch of its own, on a copy of fedmuscle-cut):
    # the job (server included) continues from its last checkpoint; the summary stays
    # until every rank has read it
    muscle = tmp_path / "runs" / "fedmuscle-ext"
    shutil.copytree(tmp_path / "runs" / "fedmuscle-cut", muscle)
    before = untimed(read_metrics(tmp_path / "runs" / "fedmuscle-cut" / "metrics.jsonl"))
    proc = run_mpi(4, ["-m", "fedsheaf", "run", "--resume", str(muscle), "train.epochs=4"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"extending the finished run {muscle} from 3 to 4 epochs" in proc.stdout
    after = untimed(read_metrics(muscle / "metrics.jsonl"))
    assert after[:EPOCHS] == before and [r["epoch"] for r in after] == [1, 2, 3, 4]
    assert json.loads((muscle / "summary.json").read_text())["epoch"] == 4
    assert not (muscle / "summary.prev.json").exists() and (muscle / "graph.yaml").is_file()
    assert checkpoint.latest(muscle, 4).epoch == 4
    # traffic with the server, per agent and epoch: FedProto sends its class sums + counts
    # (C x (D+1) float32); FedMuscle's epochs 1 and 3 are task-only, epoch 2 aligns and
    # sends K x D pilot latents per step
    for name, up in (
        ("fedproto", [CLASSES * (D + 1) * 4] * EPOCHS),
        ("fedmuscle", [0, STEPS * K * D * 4, 0]),
    ):
        records = read_metrics(tmp_path / "runs" / name / "metrics.jsonl")
        for rec, sent in zip(records, up, strict=True):
            assert [a["server_bytes_sent"] for a in rec["agents"]] == [sent] * 3
            assert rec["server_bytes_sent"] == 3 * sent
            assert (rec["server_bytes_received"] > 0) == (sent > 0)  # an answer to each upload
        assert res[name]["server_bytes_sent_total"] == 3 * sum(up)
        assert res[name]["server_bytes_received_total"] == sum(
            r["server_bytes_received"] for r in records
        )


def test_a_job_without_the_server_rank_is_refused(tmp_path):
    from tests.conftest import run_mpi

    cfg = _write(tmp_path)
    proc = run_mpi(3, ["-m", "fedsheaf", "run", str(cfg), "algorithm=fedproto"], timeout=120)
    assert proc.returncode == 2
    assert "plus a server rank: launch with mpiexec -n 4" in proc.stderr


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
