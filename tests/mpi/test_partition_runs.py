"""Runs with ``data.partition`` / ``federated.partition`` other than the defaults, on real
ranks: Dirichlet(α) in each family, and a user's partition inline (PYTHONPATH)."""

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import mpi_env, run_mpi

pytestmark = pytest.mark.mpi
QUICK = ["train.epochs=1", "train.steps_per_epoch=3", "train.eval_every=1"]


def _graph_run(tmp_path, name, *overrides, env=None):
    args = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    return run_mpi(4, [*args, *QUICK, f"output.name={name}", *overrides], timeout=240, env=env)


def _user_env(tmp_path: Path) -> dict[str, str]:
    code = tmp_path / "usercode"
    code.mkdir()
    (code / "userpart.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            def round_robin(labels, n_parties, seed, stride=1):
                idx = np.arange(len(labels))
                return [idx[i::n_parties] for i in range(n_parties)]

            def overlapping(labels, n_parties, seed):
                return [np.arange(len(labels) // 2)] * n_parties
            """
        )
    )
    path = os.environ.get("PYTHONPATH")
    return mpi_env(PYTHONPATH=f"{code}{os.pathsep}{path}" if path else str(code))


def test_dirichlet_graph_run_completes(tmp_path):
    proc = _graph_run(tmp_path, "dir", "data.partition=dirichlet", "data.dirichlet_alpha=0.3")
    assert proc.returncode == 0, proc.stderr
    assert "Dirichlet(α=0.3)" in proc.stdout
    summary = json.loads((tmp_path / "dir" / "summary.json").read_text())
    assert 0.0 <= summary["private_acc"] <= 1.0


def test_user_partition_inline_runs_and_a_bad_one_stops_with_one_line(tmp_path):
    env = _user_env(tmp_path)
    good = _graph_run(
        tmp_path,
        "user",
        "data.partition=userpart:round_robin",
        "data.partition_args={stride: 2}",
        env=env,
    )
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "user" / "summary.json").is_file()
    bad = _graph_run(tmp_path, "bad", "data.partition=userpart:overlapping", env=env)
    assert bad.returncode != 0
    lines = [ln for ln in bad.stderr.splitlines() if "overlapping index arrays" in ln]
    assert lines and "config key 'data.partition'" in lines[0], bad.stderr
    assert "Traceback" not in bad.stderr


def test_dirichlet_server_fedavg_run_completes(tmp_path, fmnist_root):
    cfg = {
        "name": "tinydir",
        "algorithm": "fedavg",
        "seed": 1,
        "data": {"dataset": "fashionmnist", "root": str(fmnist_root), "limit": 1000},
        "train": {"batch_size": 10, "lr": 0.01, "momentum": 0.5, "clip": None},
        "federated": {
            "clients": 6,
            "partition": "dirichlet",
            "dirichlet_alpha": 0.5,
            "partition_args": {"min_size": 20},
            "train_per_client": 30,
            "rounds": 2,
            "fraction": 0.5,
            "local_epochs": 1,
            "eval_last": 1,
        },
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = run_mpi(3, ["-m", "fedsheaf", "run", str(path)], timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "Dirichlet(α=0.5) partition" in proc.stdout + proc.stderr
    run = next((tmp_path / "runs").iterdir())
    assert (run / "summary.json").is_file()
