"""`fedsheaf run` end to end on real ranks: results, determinism, clear errors.

The two quickstart runs on 4 ranks (a module-scoped fixture) serve both the determinism
test and the memory estimate's; the runs that complete on 2 ranks (the pair with a
sliding window, the pair with an absurd batch, the Table 3 pair) share one 2-rank job
(``fedsheaf.run`` in a loop, another module-scoped fixture).
"""

import json
from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir.files import read_metrics
from tests.conftest import run_mpi, shared_data_root

pytestmark = pytest.mark.mpi
QUICK = ["train.epochs=2", "train.steps_per_epoch=4", "train.eval_every=1"]


def _run(mpirun, n, config, tmp_path, *overrides):
    return mpirun(
        n,
        ["-m", "fedsheaf", "run", str(config), f"output.dir={tmp_path}", *QUICK, *overrides],
        timeout=240,
    )


def _strip(records):
    """Metrics without wall-clock fields."""
    out = []
    for r in records:
        r = {k: v for k, v in r.items() if k != "seconds"}
        r["agents"] = [{k: v for k, v in a.items() if k != "seconds"} for a in r["agents"]]
        out.append(r)
    return out


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quickstart run twice on 4 ranks, ``seed=3``, as ``r0`` and ``r1`` under one
    directory: (that directory, the two launches)."""
    out = tmp_path_factory.mktemp("quickstart")
    runs = [
        _run(run_mpi, 4, "configs/quickstart.yaml", out, "seed=3", f"output.name=r{k}")
        for k in range(2)
    ]
    return out, runs


def test_quickstart_mesh_writes_results_and_is_deterministic(quickstart):
    tmp_path, runs = quickstart
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
    out = runs[0].stdout
    assert out.count("epoch   1/2") == 1 and "private" in out and "comm" in out
    assert "agent    d  deg  private    comm" in out
    first, second = (read_metrics(tmp_path / f"r{k}" / "metrics.jsonl") for k in range(2))
    assert len(first) == 2 and _strip(first) == _strip(second)
    summary = json.loads((tmp_path / "r0" / "summary.json").read_text())
    assert [a["dim"] for a in summary["agents"]] == [16, 24, 32, 24]
    assert 0.0 <= summary["comm_acc"] <= 1.0 and 0.0 <= summary["private_acc"] <= 1.0
    # every rank's peak RAM (each has torch loaded: tens of MB at the least), and the job's
    mem = summary["memory"]
    assert len(mem["peak_rss_bytes"]) == 4 and min(mem["peak_rss_bytes"]) > 50e6
    assert mem["peak_rss_bytes_max"] == max(mem["peak_rss_bytes"])
    assert mem["peak_rss_bytes_total"] == sum(mem["peak_rss_bytes"])
    assert "peak_cuda_bytes" not in mem and "peak memory " in out and " a rank (rank " in out
    resolved = yaml.safe_load((tmp_path / "r0" / "config.yaml").read_text())
    assert resolved["seed"] == 3 and resolved["train"]["epochs"] == 2
    # pilot traffic of one epoch: every agent sends d_i x K float32 to each neighbour per step
    dims, k, steps = [16, 24, 32, 24], 32, 4
    assert first[0]["bytes_sent"] == sum(3 * d * k * 4 * steps for d in dims)


def _pair_files(tmp_path: Path, dims, algorithm):
    graph = {
        "name": "pair",
        "nodes": [{"id": i, "dim": d} for i, d in enumerate(dims)],
        "edges": [[0, 1]] if len(dims) == 2 else [],
    }
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(graph))
    agents = [
        {"encoder": [8, d], "head": [16], "classes": [c, c + 1, c + 2]}
        for c, d in zip([0, 5], dims, strict=False)
    ]
    cfg = {
        "name": "pair",
        "algorithm": algorithm,
        "graph": str(tmp_path / "g.yaml"),
        "agents": agents,
        "sheaf": {"pilot_batch": 16},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "c.yaml"


#: ``python SCRIPT PLAN``: the (config, overrides) runs of PLAN in turn, the address space
#: capped at 8 GiB (so that a batch that is not capped fails fast instead of filling a
#: shared machine's memory).
SCRIPT = """\
import json, resource, sys
import fedsheaf

resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
for config, overrides in json.loads(open(sys.argv[1]).read()):
    fedsheaf.run(config, **overrides)
"""
QUICK_MAP = {k: int(v) for k, v in (o.split("=") for o in QUICK)}
#: The pair runs of the 2-rank job: name -> overrides (each under output.dir=<name>).
PAIR_RUNS = {
    "sliding": {"sheaf.map_refresh": "step", "sheaf.window": 48},  # a sliding window
    "absurd": {"train.batch_size": 100000000, "sheaf.pilot_batch": 100000000},
}


@pytest.fixture(scope="module")
def pair_job(tmp_path_factory):
    """One 2-rank job: the pair of latent sizes 20 and 12 run as each of
    :data:`PAIR_RUNS` (under ``<work>/<name>/``) and, where the shared FashionMNIST copy
    is, the Table 3 pair for one short epoch (under ``<work>/study/``): (work, the job)."""
    work = tmp_path_factory.mktemp("pairs")
    config = str(_pair_files(work, [20, 12], "sheaf_frl"))
    plan = [
        (config, {**QUICK_MAP, **o, "output.dir": str(work / name)})
        for name, o in PAIR_RUNS.items()
    ]
    root = shared_data_root()
    if root is not None:
        study = {
            "output.dir": str(work / "study"),
            "data.dataset": "fashionmnist",
            "data.root": str(root),
            "data.limit": 3000,
            "train.epochs": 1,
            "train.steps_per_epoch": 2,
        }
        plan.append(("configs/pair.yaml", study))
    (work / "plan.json").write_text(json.dumps(plan))
    (work / "script.py").write_text(SCRIPT)
    return work, run_mpi(2, [str(work / "script.py"), str(work / "plan.json")], timeout=400)


@pytest.mark.parametrize(
    "n,dims,algorithm,overrides",
    [
        (1, [12], "sheaf_frl", ["sheaf.overlap_exchange=true"]),  # nothing to wait for
        (2, [20, 12], "sheaf_frl", ["sheaf.map_refresh=step", "sheaf.window=48"]),  # sliding
    ],
)
def test_small_meshes_start_train_and_finish(
    request, mpirun, tmp_path, n, dims, algorithm, overrides
):
    """Launches at np = 1 and 2 (an isolated rank with the non-blocking exchange and no
    neighbour, a ``fedsheaf run`` of its own; an edge between latent sizes 20 and 12 with
    a sliding window, in the 2-rank job of ``pair_job``): each runs to its summary. Plain
    sheaf_frl and noncoop on a 2-rank pair run to their summaries in test_launch_retry.py's
    sweep; that these options compute what they should is checked elsewhere
    (test_variants.py, tests/unit)."""
    if n == 1:
        config = _pair_files(tmp_path, dims, algorithm)
        proc = _run(mpirun, n, config, tmp_path / "runs", *overrides)
        runs = tmp_path / "runs"
    else:
        work, proc = request.getfixturevalue("pair_job")
        runs = work / "sliding"
        assert PAIR_RUNS["sliding"] == {
            k: yaml.safe_load(v) for k, v in (o.split("=") for o in overrides)
        }
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((runs / f"pair-{algorithm}-seed0" / "summary.json").read_text())
    assert summary["n_agents"] == n
    if n == 1:
        assert summary["comm_acc"] is None and summary["agents"][0]["degree"] == 0
        assert "comm – (no agent has a neighbour)" in proc.stdout  # not "comm nan"
    else:
        assert 0.0 <= summary["comm_acc"] <= 1.0


@pytest.mark.parametrize(
    "n,pair,overrides,message",
    [
        # (ranks beyond the nodes: a pair's graph on 3 ranks)
        (3, True, [], "graph {graph} has 2 nodes but the job has 3 ranks"),
        # (an unknown key: the same rank-0-only path as the stratified case below; its
        # message: tests/unit/test_config.py and test_hardening.py's driver)
        # (a missing data root is found by the same collective check as the graph's size;
        # its message: tests/unit/test_data_sources.py, tests/unit/test_check_command.py)
        (  # found while the algorithm is built, on every rank (two agents each here)
            2,
            False,
            ["sheaf.pilot_strategy=stratified", "data.limit=300"],
            "stratified pilot batch 30 needs 3 pilots per class",
        ),
    ],
)
def test_bad_input_gives_one_clear_message(mpirun, tmp_path, n, pair, overrides, message):
    config = _pair_files(tmp_path, [20, 12], "sheaf_frl") if pair else "configs/quickstart.yaml"
    proc = _run(mpirun, n, config, tmp_path / "runs", *overrides)
    assert proc.returncode != 0
    message = message.format(graph=tmp_path / "g.yaml")
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").glob("*/summary.json"))


@pytest.mark.parametrize("config,n,dims", [("configs/pair.yaml", 2, [128, 128])])
def test_study_configs_start(pair_job, fmnist_root, config, n, dims):
    """The Table 3 pair on FashionMNIST: one short epoch (in the 2-rank job of
    ``pair_job``). (Table 2's 15 agents are checked in process, every agent's data and
    model, by tests/unit/test_check_command.py: 15 ranks on 2 cores cost a minute and
    exercise nothing the 4- and 5-rank launches don't.)"""
    work, proc = pair_job
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (summary_file,) = (work / "study").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert [a["dim"] for a in summary["agents"]][:3] == dims
    assert summary["n_agents"] == n


def test_an_absurd_batch_is_capped_at_the_data_and_the_run_completes(pair_job):
    """train.batch_size=100000000 used to warn, then gather a 1e8-row batch (25.6 GB of
    digits rows per rank) and die; now each agent's batch is its training set, said once.
    (In the 2-rank job of ``pair_job``, its address space capped at 8 GiB so that a batch
    that is not capped fails fast; the job's other runs say nothing of such a batch.)"""
    work, proc = pair_job
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "train.batch_size=100000000" in line]
    assert len(said) == 1 and "each of their batches is capped at its training set" in said[0]
    assert "exceeds the training samples of 2 agents (agent 0: " in said[0]
    assert proc.stderr.count("sheaf.pilot_batch=100000000 exceeds the") == 1
    assert (work / "absurd" / "pair-sheaf_frl-seed0" / "summary.json").is_file()


def test_the_memory_estimate_is_within_a_factor_2_of_the_measured_peak(quickstart):
    """``fedsheaf check``'s estimate of a rank's peak memory against the peaks the ranks
    of the same run record (``summary.json``'s ``memory``; the fixture's first run)."""
    from fedsheaf.config.sections import load_config
    from fedsheaf.rundir.preflight import check_job

    tmp_path, (proc, _) = quickstart
    assert proc.returncode == 0, proc.stderr
    measured = json.loads((tmp_path / "r0" / "summary.json").read_text())["memory"]
    config = load_config("configs/quickstart.yaml", [f"output.dir={tmp_path}", "output.name=e"])
    estimate = check_job(config, 4).memory
    assert estimate is not None
    assert measured["peak_rss_bytes_max"] / 2 < estimate.total < 2 * measured["peak_rss_bytes_max"]
