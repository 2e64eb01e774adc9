"""Data sets as plug-ins in real jobs: a user's loader named ``userdata:<loader>`` with its
directory on PYTHONPATH, loaded by every rank under mpiexec in both families; a resume on
its data changed since is refused; a graph run on a data root that holds MNIST's test
files alone (data.split=test).

The two graph runs that complete (MNIST's test files, the plug-in's first run) share one
2-rank launch (``fedsheaf.run`` in a loop, a module-scoped fixture); the refused resume
and the server-based run are ``fedsheaf run`` jobs of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, mpi_env, run_mpi
from tests.unit.test_dataset_plugins import mnist_test_files_only
from tests.user_datasets import pythonpath, write_user_datasets

pytestmark = pytest.mark.mpi

AGENTS = [
    {"encoder": [4, 6], "head": [8], "classes": [0, 1, 2, 3]},
    {"encoder": [4, 6], "head": [8], "classes": [2, 3, 4, 5]},
]


def _graph_config(tmp: Path, name: str, data: dict) -> Path:
    graph = tmp / "pair.yaml"
    graph.write_text(
        yaml.safe_dump(
            {"name": "pair", "nodes": [{"id": i, "dim": 6} for i in (0, 1)], "edges": [[0, 1]]}
        )
    )
    path = tmp / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "graph": str(graph),
                "agents": AGENTS,
                "train": {"epochs": 1, "steps_per_epoch": 2, "batch_size": 16},
                "sheaf": {"pilot_batch": 8},
                "data": {"pilot_fraction": 0.2, **data},
                "output": {"dir": str(tmp / "runs")},
            }
        )
    )
    return path


def _env(tmp: Path) -> dict[str, str]:
    return mpi_env(PYTHONPATH=pythonpath(write_user_datasets(tmp / "pkgs")))


def _fedsheaf(n: int, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_mpi(n, ["-m", "fedsheaf", *args], env=env, timeout=240)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SCRIPT = """\
import json, sys
import fedsheaf

for config, overrides in json.loads(open(sys.argv[1]).read()):
    fedsheaf.run(config, **overrides)
"""


@pytest.fixture(scope="module")
def graph_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One 2-rank job, the user's loaders on PYTHONPATH, that runs a graph run on MNIST's
    test files alone and the plug-in's first run (checkpointed every epoch) on the data
    in ``root``: {"work": ..., "root": ..., "x"/"y": that data, "env": ..., "proc": ...}."""
    work = tmp_path_factory.mktemp("dataplugins")
    env = _env(work)
    mnist = mnist_test_files_only(work / "mnist")
    t10k = _graph_config(work, "t10k", {"dataset": "mnist", "root": str(mnist), "split": "test"})
    root = work / "data"
    root.mkdir()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 1, 8, 8)).astype(np.float32), np.arange(300) % 6
    np.savez(root / "train.npz", x=x, y=y)
    plug = _graph_config(work, "plug", {"dataset": "userdata:from_root", "root": str(root)})
    plan = [(str(t10k), {}), (str(plug), {"checkpoint.every": 1})]
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "script.py").write_text(SCRIPT)
    proc = run_mpi(2, [str(work / "script.py"), str(work / "plan.json")], env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"work": work, "root": root, "x": x, "y": y, "env": env, "proc": proc}


def test_a_graph_run_on_mnist_test_files_alone(graph_runs):
    run = graph_runs["work"] / "runs" / "t10k-sheaf_frl-seed0"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n_agents"] == 2 and summary["epoch"] == 1


def test_a_plugin_graph_run_and_a_resume_on_its_changed_data(graph_runs):
    env, root, x, y = (graph_runs[k] for k in ("env", "root", "x", "y"))
    first = graph_runs["proc"]
    run = graph_runs["work"] / "runs" / "plug-sheaf_frl-seed0"
    assert json.loads((run / "summary.json").read_text())["epoch"] == 1
    assert "userdata:from_root" in first.stdout + first.stderr  # its first log line names it
    x[10, 0, 3, 3] += 1.0  # the plug-in's data change (one value)
    np.savez(root / "train.npz", x=x, y=y)
    said = (
        f"fedsheaf: error: cannot resume {run}: the data set loaded from data.root={root} "
        "differs from the one its checkpoints were trained on"
    )
    refused = _fedsheaf(2, env, "run", "--resume", str(run), "train.epochs=2")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.count("fedsheaf: error") == 1 and said in refused.stderr, refused.stderr
    checked = _cli(env, "check", "-n", "2", "--resume", str(run), "train.epochs=2")
    assert checked.returncode == 2 and said in checked.stderr, checked.stderr
    assert json.loads((run / "summary.json").read_text())["epoch"] == 1  # untouched


def test_a_server_run_on_a_plugin_and_a_bad_plugin_refused(tmp_path):
    env = _env(tmp_path)
    config = tmp_path / "fedavg.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "plug",
                "algorithm": "fedavg",
                "data": {
                    "dataset": "userdata:images",
                    "dataset_args": {"n": 200, "classes": 10, "side": 16},
                    "root": str(tmp_path),
                },
                "train": {"batch_size": 10},
                "federated": {
                    "clients": 2,
                    "classes_per_client": 5,
                    "train_per_client": 20,
                    "test_per_client": 5,
                    "rounds": 1,
                },
                "output": {"dir": str(tmp_path / "runs")},
            }
        )
    )
    proc = _fedsheaf(3, env, "run", str(config))
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(
        (tmp_path / "runs" / "plug-fedavg-seed0" / "checkpoints" / "latest.json").read_text()
    )["data"]
    assert len(recorded.split("+")) == 2  # both splits fingerprinted
    for ref, said in (
        ("userdata:train_only", "(test split) could not be loaded: its loader raised"),
        ("userdata:nope", "does not exist: userdata has no 'nope'"),
    ):
        bad = _cli(env, "check", "-n", "3", str(config), f"data.dataset={ref}", "output.name=x")
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.count("\n") == 1, bad.stderr
        assert bad.stderr.startswith(
            f"fedsheaf: error: config key 'data.dataset': dataset '{ref}'"
        ), bad.stderr
        assert said in bad.stderr
