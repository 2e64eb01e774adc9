"""Runs with ``data.partition`` / ``federated.partition`` other than the defaults, on real
ranks: Dirichlet(α) in each family, and a user's partition inline (PYTHONPATH).

The two graph runs that complete (Dirichlet, the user's round robin) share one 4-rank
launch (``fedsheaf.run`` in a loop, a module-scoped fixture); the refused user partition
is a ``fedsheaf run`` of its own (on 2 ranks).
"""

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import mpi_env, run_mpi

pytestmark = pytest.mark.mpi
QUICK = ["train.epochs=1", "train.steps_per_epoch=3", "train.eval_every=1"]
SCRIPT = """\
import json, sys
import fedsheaf

for overrides in json.loads(open(sys.argv[1]).read()):
    fedsheaf.run("configs/quickstart.yaml", **overrides)
"""
#: The quickstart graph runs of the fixture: name -> overrides.
GRAPH_RUNS = {
    "dir": {"data.partition": "dirichlet", "data.dirichlet_alpha": 0.3},
    "user": {"data.partition": "userpart:round_robin", "data.partition_args": {"stride": 2}},
}


def _graph_run(tmp_path, name, *overrides, env=None, ranks=4):
    args = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", f"output.dir={tmp_path}"]
    args += [*QUICK, f"output.name={name}", *overrides]
    return run_mpi(ranks, args, timeout=240, env=env)


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


@pytest.fixture(scope="module")
def graph_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The :data:`GRAPH_RUNS` in one 4-rank job, the user's module on PYTHONPATH: {"dir":
    their output dir, "proc": the job}."""
    work = tmp_path_factory.mktemp("partitions")
    quick = {k: int(v) for k, v in (o.split("=") for o in QUICK)}
    plan = [
        {**quick, **o, "output.dir": str(work / "runs"), "output.name": name}
        for name, o in GRAPH_RUNS.items()
    ]
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "script.py").write_text(SCRIPT)
    args = [str(work / "script.py"), str(work / "plan.json")]
    proc = run_mpi(4, args, timeout=300, env=_user_env(work))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"dir": work / "runs", "proc": proc}


def test_dirichlet_graph_run_completes(graph_runs):
    proc = graph_runs["proc"]
    assert "Dirichlet(α=0.3)" in proc.stdout
    summary = json.loads((graph_runs["dir"] / "dir" / "summary.json").read_text())
    assert 0.0 <= summary["private_acc"] <= 1.0


def test_user_partition_inline_runs_and_a_bad_one_stops_with_one_line(graph_runs, tmp_path):
    assert (graph_runs["dir"] / "user" / "summary.json").is_file()
    env = _user_env(tmp_path)
    # (refused while the data is split, before training: two agents a rank will do)
    bad = _graph_run(tmp_path, "bad", "data.partition=userpart:overlapping", env=env, ranks=2)
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
