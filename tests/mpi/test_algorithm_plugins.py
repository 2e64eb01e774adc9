"""A user's decentralized algorithm on real ranks (np = 2, scikit-learn's digits: no data
files), named inline as ``module:Class`` with its module on PYTHONPATH only:

* it runs (every rank builds it, with ``algorithm_args``), its run directory is named by
  its class, and a run stopped after 2 of 3 epochs and resumed from its checkpoint ends
  with the records of the run that went straight through;
* a name that is unknown, that does not import, or whose factory returns something other
  than a DecentralizedAlgorithm stops the job before training, in one line naming the key.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir.files import read_metrics
from tests.conftest import BackgroundMpi, mpi_env, run_mpi, untimed

pytestmark = pytest.mark.mpi
NP = 2
USER = "fedsheaf_mpi_useralgo"

USER_CODE = """
import json

from fedsheaf.algorithms.noncoop import NonCooperative


class Logged(NonCooperative):
    '''NonCooperative with one override: each rank notes each epoch it ends.'''

    def __init__(self, agent, nbr, reporter, log):
        super().__init__(agent, nbr, reporter)
        self.log = log

    def end_epoch(self, epoch):
        super().end_epoch(epoch)
        with open(self.log, "a") as f:
            f.write(json.dumps([self.agent.id, epoch]) + "\\n")


def returns_a_number(agent, nbr, reporter, log=None):
    return 42
"""


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    code = tmp_path / "usercode"
    code.mkdir()
    (code / f"{USER}.py").write_text(textwrap.dedent(USER_CODE))
    graph = tmp_path / "duo.yaml"
    graph.write_text(
        "name: duo\nnodes:\n  - {id: 0, dim: 8, classes: [0, 1, 2, 3, 4, 5]}\n"
        "  - {id: 1, dim: 8, classes: [4, 5, 6, 7, 8, 9]}\nedges:\n  - [0, 1]\n"
    )
    cfg = {
        "name": "plug",
        "algorithm": f"{USER}:Logged",
        "graph": str(graph),
        "seed": 4,
        "data": {"dataset": "digits"},
        "agents": [
            {"encoder": [4, 8], "head": [16], "classes": [0, 1, 2, 3, 4, 5]},
            {"encoder": [4, 8], "head": [16], "classes": [4, 5, 6, 7, 8, 9]},
        ],
        "train": {"epochs": 3, "steps_per_epoch": 2, "batch_size": 16},
    }
    path = tmp_path / "plug.yaml"
    path.write_text(yaml.safe_dump(cfg))
    pythonpath = os.environ.get("PYTHONPATH")
    env = mpi_env(PYTHONPATH=f"{code}{os.pathsep}{pythonpath}" if pythonpath else str(code))
    return path, env


def _log(path: Path) -> list[list[int]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_plugin_algorithm_runs_names_its_run_and_resumes(tmp_path):
    cfg, env = _setup(tmp_path)
    runs = {name: tmp_path / name for name in ("ref", "cut")}
    logs = {name: tmp_path / f"{name}.jsonl" for name in runs}
    jobs = [
        BackgroundMpi(
            NP,
            [
                "-m",
                "fedsheaf",
                "run",
                str(cfg),
                f"output.dir={runs[name]}",
                f"algorithm_args={{log: {logs[name]}}}",
                *([] if name == "ref" else ["train.epochs=2"]),
            ],
            tmp_path / f"{name}.out",
            env=env,
        )
        for name in runs
    ]
    try:
        for job in jobs:
            assert job.wait(timeout=300) == 0, job.output()
    finally:
        for job in jobs:
            job.kill()
    ref, cut = (runs[name] / "plug-Logged-seed4" for name in ("ref", "cut"))
    assert sorted(p.name for p in runs["ref"].iterdir()) == ["plug-Logged-seed4"]
    summary = json.loads((ref / "summary.json").read_text())
    assert summary["algorithm"] == f"{USER}:Logged" and summary["n_agents"] == NP
    # (end_epoch counts from 0)
    assert sorted(map(tuple, _log(logs["ref"]))) == [(a, e) for a in (0, 1) for e in (0, 1, 2)]
    assert "fedsheaf: warning" not in jobs[0].output()

    proc = run_mpi(
        NP, ["-m", "fedsheaf", "run", "--resume", str(cut), "train.epochs=3"], env=env, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"resuming {cut} after epoch 2" in proc.stdout
    resumed_epochs = sorted(map(tuple, _log(logs["cut"])))
    assert resumed_epochs == [(a, e) for a in (0, 1) for e in (0, 1, 2)]  # the third once
    assert untimed(read_metrics(cut / "metrics.jsonl")) == untimed(
        read_metrics(ref / "metrics.jsonl")
    )
    resumed = json.loads((cut / "summary.json").read_text())
    assert untimed(resumed) == untimed(summary)


@pytest.mark.parametrize(
    ("ref", "message", "claimed"),
    [
        ("noncoopp", "algorithm 'noncoopp' is unknown (did you mean 'noncoop'?)", False),
        (
            "fedsheaf_absent_module:Thing",
            "does not import: no module named 'fedsheaf_absent_module'",
            False,
        ),
        (
            f"{USER}:returns_a_number",
            "returned an instance of int, not a fedsheaf.algorithms.base.DecentralizedAlgorithm",
            True,
        ),
    ],
    ids=["unknown", "no-import", "wrong-return"],
)
def test_a_bad_algorithm_stops_the_job_before_training_in_one_line(tmp_path, ref, message, claimed):
    cfg, env = _setup(tmp_path)
    out = tmp_path / "runs"
    proc = run_mpi(
        NP,
        ["-m", "fedsheaf", "run", str(cfg), f"output.dir={out}", f"algorithm={ref}"],
        env=env,
        timeout=240,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    errors = [line for line in text.splitlines() if "fedsheaf: error" in line]
    assert len(errors) == 1, text
    assert "config key 'algorithm'" in errors[0] and message in errors[0], errors[0]
    assert "Traceback" not in text and "epoch   1/" not in text
    run = out / f"plug-{ref.rpartition(':')[2]}-seed4"
    assert claimed or not run.exists()  # (refused before the run directory is claimed)
    assert not (run / "metrics.jsonl").exists()
