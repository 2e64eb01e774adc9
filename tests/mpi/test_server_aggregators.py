"""Server-side aggregators on real ranks (head-only FedAvg on diabetes3: no data files).

* FedAdam for 4 rounds straight, and 2 rounds then resumed for 2 more: the same records
  bit for bit (the server's checkpoint carries the optimiser's moments);
* a user's aggregator given inline as ``module:callable`` (its module on PYTHONPATH, with
  keyword arguments from the config) is what the server calls, once a round;
* one that returns the wrong shape stops the job with one line naming the key.

Both tests share two launches of 3 ranks (a module fixture; several ``fedsheaf run`` in
one job), to keep the file fast on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import mpi_env, run_mpi_batch, untimed

pytestmark = pytest.mark.mpi
NP, ROUNDS, CUT = 3, 4, 2
USER = "fedsheaf_mpi_useragg"
KEY = "federated.aggregator"
ADAM = [f"{KEY}=fedadam", f"{KEY}_args={{eta: 0.05, tau: 0.01}}"]


def _config(tmp_path: Path) -> Path:
    cfg = {
        "name": "agg",
        "algorithm": "head_fedavg",
        "seed": 2,
        "federated": {
            "clients": 4,
            "rounds": ROUNDS,
            "fraction": 0.5,
            "local_epochs": 2,
            "eval_every": 1,
        },
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "batch_size": 32},
        "head": {"data": "diabetes3", "backbone": [8], "features": 4, "rho": 1.0e-3},
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _user_module(tmp_path: Path) -> Path:
    """The user's code, in a folder of its own that only PYTHONPATH names."""
    code = tmp_path / "usercode"
    code.mkdir()
    (code / f"{USER}.py").write_text(
        textwrap.dedent(
            """
            import json
            import numpy as np

            class Recorder:
                '''Moves ``factor`` of the way to the plain mean; notes each call.'''

                def __init__(self, log, factor=1.0):
                    self.log, self.factor = log, factor

                def aggregate(self, global_params, updates, counts, round_):
                    with open(self.log, "a") as f:
                        f.write(json.dumps([round_, len(updates), list(counts),
                                            int(global_params.size)]) + "\\n")
                    mean = np.mean(np.stack(updates), axis=0)
                    return global_params + self.factor * (mean - global_params)

            class WrongShape:
                def aggregate(self, global_params, updates, counts, round_):
                    return np.zeros(3)
            """
        )
    )
    return code


def _env(code: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return mpi_env(PYTHONPATH=f"{code}{os.pathsep}{path}" if path else str(code))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both tests' runs in two launches of NP ranks (several ``fedsheaf run`` in one job:
    tests/conftest.py's run_mpi_batch; startup dominates these short runs on 2 cores):
    FedAdam's reference and its run of CUT rounds, the user's aggregator, an aggregator
    that does not import; then the FedAdam run resumed, and last (it ends the job) the
    aggregator of the wrong shape."""
    tmp_path = tmp_path_factory.mktemp("aggregators")
    cfg = str(_config(tmp_path))
    env = _env(_user_module(tmp_path))
    log = tmp_path / "calls.jsonl"
    user = [f"federated.aggregator={USER}:Recorder", f"federated.aggregator_args={{log: {log}}}"]
    runs = tmp_path / "runs"
    found: dict[str, Any] = {"runs": runs, "log": log}
    first = [
        [cfg, *ADAM, "output.name=ref", "checkpoint.every=0"],
        [cfg, *ADAM, "output.name=short", f"rounds={CUT}", f"checkpoint.every={CUT}"],
        [cfg, "output.name=user", "checkpoint.every=0", *user],
        [cfg, f"{KEY}=nowhere_pkg:Agg"],
    ]
    procs = run_mpi_batch(NP, [["run", *args] for args in first], tmp_path, env=env)
    *found["first"], found["nowhere"] = procs
    for proc in found["first"]:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the server's checkpoint after round CUT, before the resume
    found["state"] = checkpoint.load_rank(checkpoint.latest(runs / "short", NP), 0)
    second = [
        ["--resume", str(runs / "short"), f"rounds={ROUNDS}"],
        [cfg, "output.name=wrong", f"{KEY}={USER}:WrongShape"],
    ]
    procs = run_mpi_batch(NP, [["run", *args] for args in second], tmp_path, env=env)
    found["resumed"], found["wrong"] = procs
    return found


def test_fedadam_resumes_bitwise_and_a_user_aggregator_runs_inline(jobs):
    runs, log = jobs["runs"], jobs["log"]
    ref = jobs["first"][0]
    assert "fedsheaf: server aggregator fedadam {eta: 0.05, tau: 0.01}" in ref.stdout + ref.stderr

    # the server's checkpoint after round 2 holds FedAdam's moments (float64, one per value)
    state = jobs["state"]
    moments = state["aggregator"]
    assert sorted(moments) == ["m", "v"] and moments["m"].dtype == torch.float64
    assert moments["m"].numel() == state["w"].numel() and bool(moments["m"].abs().sum() > 0)

    proc = jobs["resumed"]
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {runs / 'short'} after round {CUT}" in proc.stdout
    reference = untimed(read_metrics(runs / "ref" / "metrics.jsonl"))
    assert [r["round"] for r in reference] == list(range(1, ROUNDS + 1))
    assert untimed(read_metrics(runs / "short" / "metrics.jsonl")) == reference
    ref_summary = untimed(json.loads((runs / "ref" / "summary.json").read_text()))
    assert untimed(json.loads((runs / "short" / "summary.json").read_text())) == ref_summary

    # the user's aggregator: called by the server once a round, with the round's uploads
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[0] for c in calls] == list(range(1, ROUNDS + 1))
    assert all(c[1] == 2 and len(c[2]) == 2 and min(c[2]) > 0 for c in calls)
    shared = state["w"].numel()
    assert all(c[3] == shared for c in calls)
    mine = read_metrics(runs / "user" / "metrics.jsonl")
    assert [r["selected"] for r in mine] == [r["selected"] for r in reference]
    assert [r["loss"] for r in mine] != [r["loss"] for r in reference]  # another server step


def test_an_aggregator_returning_the_wrong_shape_stops_the_job_in_one_line(jobs):
    """One that returns the wrong shape stops the job, one that does not import is
    refused: each in one line naming the key (or the aggregator), no traceback."""
    proc = jobs["wrong"]
    assert proc.returncode != 0
    message = (
        f"config key 'federated.aggregator': '{USER}:WrongShape' returned a ndarray of shape "
        "(3,) in round 1, expected a flat vector of"
    )
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    proc = jobs["nowhere"]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("aggregator 'nowhere_pkg:Agg' does not import") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
