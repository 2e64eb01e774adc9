"""A user's own models on real ranks, named as 'module:callable' with the module on
PYTHONPATH (nothing installed): an MLP agent model beside the built-in cnn in a
Sheaf-FRL run, a model whose latent size is not the graph's stopping the job in one line,
and an MLP server model with its head under HEAD in FedRep and FedAvg.

The runs that complete (the agent model's and both server models') share one 3-rank
launch (``fedsheaf.run`` in a loop, a module-scoped fixture); the refused one is a
``fedsheaf run`` of its own.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import mpi_env, run_mpi, shared_data_root
from tests.user_models import MODULE, pythonpath, write_user_models

pytestmark = pytest.mark.mpi

SCRIPT = """\
import json, sys
import fedsheaf

for config in json.loads(open(sys.argv[1]).read()):
    fedsheaf.run(config)
"""
#: The server-based runs: (algorithm, what it shares with the server).
SERVER = [("fedrep", "body"), ("fedavg", "all")]


def _graph_config(tmp_path: Path, d1: int) -> str:
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
    return str(path)


def _server_config(tmp_path: Path, fmnist_root: Path, algorithm: str) -> str:
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
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One 3-rank job that runs the agent-model graph run and (where the shared
    FashionMNIST copy is) both server-model runs: {"dir": their output dir, "proc": ...}."""
    work = tmp_path_factory.mktemp("plugmodels")
    code = write_user_models(work / "code")
    plan = [_graph_config(work, d1=12)]
    root = shared_data_root()
    if root is not None:
        plan += [_server_config(work, root, algorithm) for algorithm, _ in SERVER]
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "script.py").write_text(SCRIPT)
    env = mpi_env(PYTHONPATH=pythonpath(code))
    proc = run_mpi(3, [str(work / "script.py"), str(work / "plan.json")], timeout=300, env=env)
    return {"dir": work / "runs", "proc": proc}


def test_a_plug_in_agent_model_trains_beside_the_cnn(runs):
    proc = runs["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((runs["dir"] / "plugmodels-sheaf_frl-seed3" / "summary.json").read_text())
    assert [a["dim"] for a in summary["agents"]] == [8, 12, 8]
    assert all(0.0 <= a["private_acc"] <= 1.0 for a in summary["agents"])


def test_a_plug_in_agent_model_of_another_latent_size_stops_the_job_in_one_line(tmp_path):
    code = write_user_models(tmp_path / "code")
    config = _graph_config(tmp_path, d1=10)
    env = mpi_env(PYTHONPATH=pythonpath(code))
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


@pytest.mark.parametrize(("algorithm", "shared"), SERVER)
def test_a_plug_in_server_model_runs_with_its_head_named_by_head(
    runs, fmnist_root, algorithm, shared
):
    proc = runs["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(
        (runs["dir"] / f"plugserver-{algorithm}-seed2" / "summary.json").read_text()
    )
    body = (math.prod((1, 28, 28)) + 1) * 24 + (24 + 1) * 32  # classifier: (32 + 1) * 10
    assert summary["shared_params"] == (body if shared == "body" else body + 330)
    assert 0.0 <= summary["score"] <= 1.0
