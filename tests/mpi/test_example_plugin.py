"""The worked example outside the package, end to end on real ranks.

``examples/plugin`` (a separate package registering a data set, an agent model, a server
model, a partition, an aggregator and an algorithm through entry points) is pip-installed
into a folder of its own under tmp_path (never into the shared environment; built from a
copy, so that no build/ or *.egg-info lands in the checkout) and put on the ranks'
PYTHONPATH, where importlib.metadata finds its entry points:

* ``fedsheaf check`` names every plug-in the decentralized config uses, as an entry point;
* the decentralized config (Sheaf-FRL, three MLP agents of d = 8/12/16) runs at np=3;
* the server-based config (FedRep on the MLP server model, the example's partition and
  aggregator) runs at np=3 (1 server + 2 workers);
* ``examples/python_api.py`` runs its λ study on the quickstart at np=4 and prints its
  table once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, mpi_env, run_mpi

pytestmark = pytest.mark.mpi

EXAMPLE = REPO / "examples" / "plugin"
CONFIGS = "examples/plugin/configs"
ENTRY_POINTS = {
    "data.dataset": ("example_tabular", "fedsheaf_example.data:load_tabular"),
    "agents[i].model": ("example_mlp", "fedsheaf_example.models:build_agent_mlp"),
    "data.partition": ("example_sorted_chunks", "fedsheaf_example.partition:sorted_chunks"),
    "algorithm": (
        "example_smooth_noncoop",
        "fedsheaf_example.algorithm:SmoothedNonCooperative",
    ),
}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a folder of its own (its .dist-info there)."""
    base = tmp_path_factory.mktemp("plugin")
    source = base / "src"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc")
    shutil.copytree(EXAMPLE, source, ignore=ignore)
    site = base / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--disable-pip-version-check", "--quiet", "--target", str(site),
         str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(site.glob("fedsheaf_example_plugin-*.dist-info/entry_points.txt"))
    return site


def _env(site: Path) -> dict[str, str]:
    before = os.environ.get("PYTHONPATH")
    return mpi_env(PYTHONPATH=os.pathsep.join([str(site), *([before] if before else [])]))


def test_check_names_the_installed_plugins(plugin_site: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fedsheaf", "check", f"{CONFIGS}/decentralized.yaml",
         "algorithm=example_smooth_noncoop", "algorithm_args={smoothing: 0.2}"],
        cwd=REPO,
        env=_env(plugin_site),
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for key, (name, target) in ENTRY_POINTS.items():
        assert f"{key} = {name} -> entry point {target}" in out, out
    assert "Traceback" not in out


def test_decentralized_config_runs_on_the_plugins(plugin_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = run_mpi(
        3,
        ["-m", "fedsheaf", "run", f"{CONFIGS}/decentralized.yaml", f"output.dir={out}"],
        env=_env(plugin_site),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = out / "plugin_tabular-sheaf_frl-seed0"
    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["data"]["dataset"] == "example_tabular"
    assert config["data"]["partition"] == "example_sorted_chunks"
    assert [a["model"] for a in config["agents"]] == ["example_mlp"] * 3
    assert [a["dim"] for a in summary["agents"]] == [8, 12, 16]  # the MLPs' d, as the graph's
    assert summary["private_acc"] > 0.5  # six classes: chance is 1/6
    assert "Traceback" not in proc.stderr


def test_server_config_runs_on_the_plugins(plugin_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = run_mpi(
        3,
        ["-m", "fedsheaf", "run", f"{CONFIGS}/server.yaml", f"output.dir={out}"],
        env=_env(plugin_site),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = out / "plugin_tabular_server-fedrep-seed0"
    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    fed = config["federated"]
    assert config["data"]["dataset"] == "example_tabular"
    assert (fed["model"], fed["partition"], fed["aggregator"]) == (
        "example_server_mlp",
        "example_sorted_chunks",
        "example_clipped_mean",
    )
    assert summary["n_clients"] == 6 and summary["score"] > 0.5
    assert "server aggregator example_clipped_mean {clip: 2.0}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_python_api_example_runs_a_study(tmp_path: Path) -> None:
    out = tmp_path / "study"
    proc = run_mpi(
        4,
        ["examples/python_api.py", "--out", str(out), "--epochs", "1", "--seeds", "0",
         "--lams", "0", "0.3", "--set", "data.limit=600"],
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("lam0-seed0", "lam0.3-seed0"):
        assert (out / name / "summary.json").is_file()
    assert proc.stdout.count("== runs") == 1  # rank 0 prints the tables
    table = proc.stdout.split("== runs", 1)[1].split("== mean over seeds")[0].split("\n")
    rows = [line.split() for line in table if line.strip()]
    assert rows[0][:4] == ["lam", "seed", "private", "comm"] and len(rows) == 3
    assert "Traceback" not in proc.stderr
