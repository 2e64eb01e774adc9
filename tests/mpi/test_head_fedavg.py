"""Head-only FedAvg on real ranks: Gram metrics logged, same numbers at np=2 and np=4.

Six diabetes3 clients (projection partition), half of them per round, with every
option on (proximal term, alignment, half moment correction, so the moment
exchange's reply is used). At np=2 one worker hosts all six clients; at np=4
three workers host two each. The server averages in client-id order and every
random choice is keyed by (seed, client, round), so metrics.jsonl must agree.
"""

import json

import pytest
import yaml

from fedsheaf.rundir.files import read_metrics

pytestmark = pytest.mark.mpi
GRAM = ("gram_err_star", "gram_err_cen", "dir_err_star", "dir_err_cen", "delta", "traj_err")


def _config(tmp_path):
    cfg = {
        "name": "head",
        "algorithm": "head_fedavg",
        "seed": 1,
        "federated": {
            "clients": 6,
            "rounds": 3,
            "fraction": 0.5,
            "local_epochs": 5,
            "eval_every": 1,
        },
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "batch_size": 32},
        "head": {
            "data": "diabetes3",
            "backbone": [16],
            "features": 4,
            "rho": 1.0e-3,
            "align": True,
            "moment_gamma": 0.5,
            "lr_min": 1.0e-4,
        },
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "head.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _comparable(records):
    drop = {"seconds", "train_seconds", "bytes"}  # bytes: what MPI moved, per worker rank
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


def test_head_fedavg_logs_gram_errors_independently_of_the_rank_count(mpirun, tmp_path):
    cfg = _config(tmp_path)
    procs = {
        n: mpirun(n, ["-m", "fedsheaf", "run", str(cfg), f"output.name=np{n}"], timeout=240)
        for n in (2, 4)
    }
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
    assert "6 clients on 3 worker ranks (up to 2 per rank)" in procs[4].stdout
    assert "G_t vs G_star" in procs[4].stdout
    runs = {n: tmp_path / "runs" / f"np{n}" for n in (2, 4)}
    m2, m4 = (read_metrics(runs[n] / "metrics.jsonl") for n in (2, 4))
    assert len(m2) == 3
    for record in m2:
        assert all(k in record and record[k] >= 0 for k in GRAM)
        assert len(record["selected"]) == 3 and "test_mse" in record
    assert m2[0]["bytes"]["setup_up"] == 6 * 8 * (1 + 1 + 3 + 9)  # [client, N, μ, Σ] per client
    # protocol bytes: heads to and from the 3 selected clients; before round 1, each of the
    # 6 clients sends its moments and gets Σ_cen back (one worker rank: MPI's copy is one)
    head = m2[1]["bytes"]["params_up"] // 3
    for r in m2[1:]:
        assert r["bytes_up"] == r["bytes_down"] == 3 * head
    assert m2[0]["bytes_up"] == 3 * head + m2[0]["bytes"]["setup_up"]
    assert m2[0]["bytes_down"] == 3 * head + 6 * m2[0]["bytes"]["setup_down"]
    assert _comparable(m2) == _comparable(m4)
    summary = json.loads((runs[4] / "summary.json").read_text())
    assert summary["final"]["gram_err_star"] == m4[-1]["gram_err_star"]
    assert len(summary["references"]["G_star"]) == 3
