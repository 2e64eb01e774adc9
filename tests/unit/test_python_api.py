"""The Python API (fedsheaf.run, fedsheaf.load_run, fedsheaf.register_aggregator): a light
``import fedsheaf``, documented public names, run directories read back as records, and a
one-rank user error raised in Python instead of ending the process."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fedsheaf
from fedsheaf.rundir.files import RunDir
from tests.conftest import REPO, mpi_env

AGENT_FIELDS = {"agent", "dim", "degree", "private_acc", "comm_acc"}


def _python(code: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = mpi_env()
    for name in [k for k in env if k.startswith(("OMPI_COMM_WORLD", "PMIX_", "PMI_"))]:
        del env[name]  # a plain process, not a rank of some launcher's job
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def test_import_fedsheaf_and_its_api_names_stay_light() -> None:
    """(Every name but GeneratorDropout, a torch module: it imports torch.)"""
    proc = _python(
        "import sys, fedsheaf\n"
        "names = [getattr(fedsheaf, n) for n in fedsheaf.__all__ if n != 'GeneratorDropout']\n"
        "print(sorted(m for m in ('torch', 'mpi4py') if m in sys.modules))\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_public_name_is_documented() -> None:
    assert {"run", "load_run", "register_aggregator", "RunSummary", "Run"} <= set(fedsheaf.__all__)
    missing = []
    for name in fedsheaf.__all__:
        if name == "__version__":
            continue
        obj = getattr(fedsheaf, name)
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("fedsheaf.api"):
            for attr, member in vars(obj).items():
                func = getattr(member, "__func__", member)
                if not attr.startswith("_") and callable(func) and not (func.__doc__ or "").strip():
                    missing.append(f"{name}.{attr}")
    assert missing == []
    assert fedsheaf.__doc__ and "run" in fedsheaf.__doc__
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = fedsheaf.nothing_here


def _agent(i: int, epoch: int) -> dict[str, object]:
    return {
        "agent": i,
        "dim": 8 * (i + 1),
        "degree": 1,
        "private_acc": 0.5 + 0.1 * i + epoch / 100,
        "comm_acc": 0.25 + epoch / 100,
        "comm_by_neighbour": {str(1 - i): 0.25},
        "epoch": epoch,
    }


def _write_run(path: Path, epochs: int, finished: bool) -> None:
    run_dir = RunDir(path)
    run_dir.write_config("name: tiny\nalgorithm: sheaf_frl\nseed: 3\ntrain:\n  epochs: 2\n")
    for epoch in range(1, epochs + 1):
        run_dir.append_metrics(
            {
                "epoch": epoch,
                "loss": 1.0 / epoch,
                "private_acc": 0.5,
                "comm_acc": 0.25,
                "bytes": {"up": 10, "down": 20},
                "agents": [_agent(0, epoch), _agent(1, epoch)],
            }
        )
    if finished:
        run_dir.write_summary(
            {
                "name": "tiny",
                "algorithm": "sheaf_frl",
                "seed": 3,
                "n_agents": 2,
                "private_acc": 0.55,
                "comm_acc": 0.27,
                "comm_acc_deg": 0.26,
                "wall_seconds": 1.5,
                "bytes_sent_total": 1234,
                "agents": [_agent(0, epochs), _agent(1, epochs)],
            }
        )


def test_load_run_gives_flat_records(tmp_path: Path) -> None:
    _write_run(tmp_path / "run", epochs=2, finished=True)
    run = fedsheaf.load_run(tmp_path / "run")
    assert run.config["name"] == "tiny" and run.config["train"]["epochs"] == 2
    assert [r["epoch"] for r in run.epochs] == [1, 2]
    assert run.epochs[0] == {
        "epoch": 1,
        "loss": 1.0,
        "private_acc": 0.5,
        "comm_acc": 0.25,
        "bytes.up": 10,
        "bytes.down": 20,
    }
    assert [(r["epoch"], r["agent"]) for r in run.agents] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for records in (run.epochs, run.agents):  # what pandas.DataFrame(records) takes
        assert all(isinstance(r, dict) for r in records)
        assert len({tuple(sorted(r)) for r in records}) == 1  # the same columns
        for r in records:
            assert all(v is None or isinstance(v, bool | int | float | str) for v in r.values())
    assert AGENT_FIELDS <= set(run.agents[0])
    assert run.agents[3]["private_acc"] == pytest.approx(0.6 + 0.02)
    assert run.summary is not None and run.summary["bytes_sent_total"] == 1234
    json.dumps(run.epochs + run.agents)  # plain values


def test_load_run_of_an_unfinished_run_and_of_no_run(tmp_path: Path) -> None:
    _write_run(tmp_path / "run", epochs=1, finished=False)
    run = fedsheaf.load_run(str(tmp_path / "run"))
    assert run.summary is None and len(run.epochs) == 1 and len(run.agents) == 2
    with pytest.raises(fedsheaf.ConfigError, match="not a fedsheaf run directory"):
        fedsheaf.load_run(tmp_path / "nothing")


def test_run_summary_from_both_families(tmp_path: Path) -> None:
    graph = fedsheaf.RunSummary.from_dict(
        {"name": "q", "algorithm": "sheaf_frl", "seed": 1, "n_agents": 4, "private_acc": 0.5,
         "comm_acc": 0.25, "comm_acc_deg": 0.2, "wall_seconds": 2, "bytes_sent_total": 10},
        tmp_path,
    )  # fmt: skip
    assert (graph.private, graph.comm, graph.comm_degree_weighted) == (0.5, 0.25, 0.2)
    assert (graph.n_agents, graph.n_clients, graph.score, graph.bytes_total) == (4, None, None, 10)
    server = fedsheaf.RunSummary.from_dict(
        {"name": "h", "algorithm": "head_fedavg", "seed": 0, "n_clients": 3, "score": 0.49,
         "score_is": "test MSE", "bytes_up_total": 5, "bytes_down_total": 7},
        tmp_path / "h",
    )  # fmt: skip
    assert (server.n_clients, server.score, server.score_is, server.bytes_total) == (
        3,
        0.49,
        "test MSE",
        12,
    )
    assert server.private is None and server.raw["score_is"] == "test MSE"
    assert server.run_dir == tmp_path / "h"


def test_register_aggregator_registers_by_name() -> None:
    from fedsheaf.algorithms.federated.aggregators import AGGREGATORS, make_aggregator
    from fedsheaf.algorithms.federated.aggregators.fedavg import FedAvgAggregator
    from fedsheaf.config.schema import build
    from fedsheaf.config.sections import FederatedConfig

    @fedsheaf.register_aggregator("test_api_halfway")
    class Halfway(FedAvgAggregator):
        """FedAvg, then halfway back to the old parameters."""

        def __init__(self, share: float = 0.5) -> None:
            super().__init__()
            self.share = share

    assert Halfway.__name__ == "Halfway"  # the decorator gives the class back
    assert AGGREGATORS.resolve("test_api_halfway") is Halfway
    fc = build(FederatedConfig, {"aggregator": "test_api_halfway", "aggregator_args": {"share": 1}})
    built = make_aggregator(fc)
    assert isinstance(built, Halfway) and built.share == 1
    with pytest.raises(ValueError, match="registered twice"):
        fedsheaf.register_aggregator("test_api_halfway")(Halfway)


def test_one_rank_user_error_is_raised_not_exited(tmp_path: Path) -> None:
    """Without mpiexec, a config that needs 2 ranks or more (a server and a worker) is the
    one-line ConfigError, raised in Python; the script carries on (and may call run again)."""
    proc = _python(
        "import fedsheaf\n"
        "for _ in range(2):\n"
        "    try:\n"
        f"        fedsheaf.run('head_fedavg_diabetes3', output={{'dir': {str(tmp_path)!r}}})\n"
        "    except fedsheaf.ConfigError as exc:\n"
        "        print('CAUGHT', exc)\n"
        "print('ALIVE')\n"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    caught = [line for line in lines if line.startswith("CAUGHT")]
    assert len(caught) == 2 and "launch with mpiexec -n 2 or more" in caught[0], proc.stdout
    assert lines[-1] == "ALIVE"
    assert "Traceback" not in proc.stderr


def test_a_run_from_python_lets_go_of_its_run_directory_when_it_ends(tmp_path: Path) -> None:
    """The run lock (one job per run directory) is held while fedsheaf.run's job runs and
    let go when it ends, finished or refused: the session goes on, and another process
    (``fedsheaf check --resume``, a resume) may open the run."""
    proc = _python(
        "import fedsheaf\n"
        "from fedsheaf.rundir import run_lock\n"
        f"kw = dict(output={{'dir': {str(tmp_path)!r}}})\n"
        "kw['train'] = {'epochs': 1, 'steps_per_epoch': 1}\n"
        "s = fedsheaf.run('quickstart', **kw)\n"
        "print('FINISHED', run_lock.probe(s.run_dir))\n"
        "try:  # refused once the run directory is claimed: another lambda\n"
        "    fedsheaf.run('quickstart', checkpoint={'resume': True}, sheaf={'lam': 0.5}, **kw)\n"
        "except fedsheaf.ConfigError as exc:\n"
        "    print('REFUSED', run_lock.probe(s.run_dir), exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "FINISHED False" in lines, proc.stdout
    assert any(ln.startswith("REFUSED False") for ln in lines), proc.stdout
