"""A user's own models on real ranks, named as 'module:callable' with the module on
PYTHONPATH (nothing installed): an MLP agent model beside the built-in cnn in a
Sheaf-FRL run, a model whose latent size is not the graph's stopping the job in one line,
and an MLP server model with its head under HEAD in FedRep and FedAvg."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.conftest import mpi_env, run_mpi
from tests.user_models import MODULE, pythonpath, write_user_models

pytestmark = pytest.mark.mpi


def _graph_config(tmp_path, d1: int) -> tuple[str, dict]:
    code = write_user_models(tmp_path / "code")
    graph = tmp_path / "g3.yaml"
    nodes = [{"id": 0, "dim": 8}, {"id": 1, "dim": 12}, {"id": 2, "dim": 8}]
    graph.write_text(
        yaml.safe_dump({"name": "g3", "nodes": nodes, "edges": [[0, 1], [1, 2], [0, 2]]})
    )
    cfg = {
        "name": "plugmodels",
        "algorithm": "sheaf_frl",
        "seed": 3,
        "graph": str(graph),
        "data": {"dataset": "digits", "shift": 0.5},
        "agents": [
            {"model": f"{MODULE}:mlp", "model_args": {"d": 8}, "classes": [0, 1, 2, 3, 4, 5]},
            {
                "model": f"{MODULE}:mlp_seeded",
                "model_args": {"d": d1},
                "classes": [2, 3, 4, 5, 6, 7],
            },
            {"encoder": [4, 8], "head": [16], "classes": [0, 1, 2, 3, 8, 9]},
        ],
        "train": {"epochs": 2, "steps_per_epoch": 3, "batch_size": 16},
        "sheaf": {"pilot_batch": 16},
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path), mpi_env(PYTHONPATH=pythonpath(code))


def test_a_plug_in_agent_model_trains_beside_the_cnn(tmp_path):
    config, env = _graph_config(tmp_path, d1=12)
    proc = run_mpi(3, ["-m", "fedsheaf", "run", config], timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(
        (tmp_path / "runs" / "plugmodels-sheaf_frl-seed3" / "summary.json").read_text()
    )
    assert [a["dim"] for a in summary["agents"]] == [8, 12, 8]
    assert all(0.0 <= a["private_acc"] <= 1.0 for a in summary["agents"])


def test_a_plug_in_agent_model_of_another_latent_size_stops_the_job_in_one_line(tmp_path):
    config, env = _graph_config(tmp_path, d1=10)
    proc = run_mpi(3, ["-m", "fedsheaf", "run", config], timeout=240, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "encodes to d = 10" in ln]
    assert said == [
        f"fedsheaf: error (rank 1): config key 'agents[1].model': agent model "
        f"'{MODULE}:mlp_seeded' encodes to d = 10 but graph {tmp_path / 'g3.yaml'} gives node "
        "1 dim 12"
    ], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "plugmodels-sheaf_frl-seed3").exists()


@pytest.mark.parametrize(("algorithm", "shared"), [("fedrep", "body"), ("fedavg", "all")])
def test_a_plug_in_server_model_runs_with_its_head_named_by_head(
    tmp_path, fmnist_root, algorithm, shared
):
    code = write_user_models(tmp_path / "code")
    cfg = {
        "name": "plugserver",
        "algorithm": algorithm,
        "seed": 2,
        "data": {"dataset": "fashionmnist", "root": str(fmnist_root), "limit": 500},
        "train": {"batch_size": 10, "lr": 0.01, "momentum": 0.5, "clip": None},
        "federated": {
            "model": f"{MODULE}:server_mlp",
            "model_args": {"width": 24},
            "clients": 5,
            "classes_per_client": 2,
            "train_per_client": 20,
            "test_per_client": 10,
            "rounds": 2,
            "fraction": 0.6,
            "local_epochs": 1,
            "head_epochs": 1,
            "body_epochs": 1,
            "finetune_epochs": 1,
            "eval_last": 1,
        },
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = mpi_env(PYTHONPATH=pythonpath(code))
    proc = run_mpi(3, ["-m", "fedsheaf", "run", str(path)], timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(
        (tmp_path / "runs" / f"plugserver-{algorithm}-seed2" / "summary.json").read_text()
    )
    body = (math.prod((1, 28, 28)) + 1) * 24 + (24 + 1) * 32  # classifier: (32 + 1) * 10
    assert summary["shared_params"] == (body if shared == "body" else body + 330)
    assert 0.0 <= summary["score"] <= 1.0
