"""Server-based runs on real ranks: results, rank-count independence, clear errors.

One tiny FedRep configuration (FashionMNIST, first 2,000 images of each split,
10 clients x 2 classes) runs at np=2 (one worker hosting all 10 clients) and at
np=4 (three workers hosting 4/3/3). Because the server averages in client-id
order and every random choice is keyed by (seed, client, round), the two runs
must produce identical metrics -- which also shows that the same config and
seed give the same metrics twice. The np=4 run uses dynamic placement (the
default: the server hands sampled clients to whichever worker asks, their private
heads follow them); balanced and static placement must give the same metrics. Also:
FedAvg-FT is FedAvg plus a final head round, FedAvg's average is weighted by client
size, Local trains every client every round and shares nothing, and bad setups get one
clear message.

A module fixture runs everything in one launch per rank count (np=4: three placements;
np=2; np=3: fedavg, fedavg_ft, weighted fedavg, local; np=3 again: local's doctored
resume and a bad setup), several ``fedsheaf run`` in one job, to keep the file fast on
a 2-core machine; np=1 (refused) is launched alone.
"""

import json

import numpy as np
import pytest
import torch
import yaml

from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.protocol import place_clients
from fedsheaf.config.sections import load_config
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import run_mpi_batch, shared_data_root

pytestmark = pytest.mark.mpi
CLIENTS, ROUNDS, SELECTED = 10, 3, 3
SHARED_BODY = 234_872  # FedRep CNN on 28x28 inputs, all but fc3
HEAD = 650
ALL = SHARED_BODY + HEAD


def _config(tmp_path, root, **federated):
    fed = {
        "clients": CLIENTS,
        "classes_per_client": 2,
        "train_per_client": 40,
        "test_per_client": 20,
        "rounds": ROUNDS,
        "fraction": 0.3,
        "head_epochs": 1,
        "body_epochs": 1,
        "local_epochs": 1,
        "finetune_epochs": 1,
        "eval_last": 2,
        "eval_every": 2,
        "weighted": False,
    }
    fed.update(federated)
    cfg = {
        "name": "tiny",
        "algorithm": "fedrep",
        "seed": 4,
        "data": {"dataset": "fashionmnist", "root": str(root), "limit": 2000},
        "train": {
            "batch_size": 10,
            "lr": 0.01,
            "momentum": 0.5,
            "weight_decay": 1e-4,
            "clip": None,
        },
        "federated": fed,
        "output": {"dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(mpirun, n, config, *overrides):
    return mpirun(n, ["-m", "fedsheaf", "run", str(config), *overrides], timeout=240)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every run of this file, in one launch per rank count (several ``fedsheaf run`` in
    one job: tests/conftest.py's run_mpi_batch), since startup dominates these runs on 2
    cores: np=4 (dynamic, static, balanced placement), np=2, np=3 (fedavg, fedavg_ft, the
    weighted fedavg, local), then np=3 again (local's resume with a doctored history, and
    a bad setup). Each test's folder (its config c.yaml, its runs/) and each run's result.
    """
    root = shared_data_root()
    if root is None:
        pytest.skip("no shared FashionMNIST copy (../shared/data) on this machine")
    work = tmp_path_factory.mktemp("server_runs")
    dirs = {}
    for name, federated in {
        "rank": {},
        "ft": {"rounds": 2, "eval_every": 1, "finetune_epochs": 2},
        "weighted": {"rounds": 2, "train_per_client": None, "weighted": True},
        "local": {"rounds": 2, "eval_every": 1},
        "bad": {},
    }.items():
        dirs[name] = work / name
        dirs[name].mkdir()
        _config(dirs[name], root, **federated)
    rank = str(dirs["rank"] / "c.yaml")
    procs: dict = {}
    np4 = [
        ["run", rank, "output.name=np4"],
        ["run", rank, "output.name=static", "federated.placement=static", "train.epochs=7"],
        ["run", rank, "output.name=balanced", "federated.placement=balanced"],
    ]
    procs[4], procs["static"], procs["balanced"] = run_mpi_batch(4, np4, work / "np4")
    (procs[2],) = run_mpi_batch(2, [["run", rank, "output.name=np2"]], work / "np2")
    ft, weighted, local = (str(dirs[n] / "c.yaml") for n in ("ft", "weighted", "local"))
    np3 = [
        *(["run", ft, f"algorithm={a}", f"output.name={a}"] for a in ("fedavg", "fedavg_ft")),
        ["run", weighted, "algorithm=fedavg", "output.name=w", "checkpoint.every=1"],
        ["run", local, "algorithm=local", "output.name=local"],
    ]
    procs["fedavg"], procs["fedavg_ft"], procs["w"], procs["local"] = run_mpi_batch(
        3, np3, work / "np3"
    )
    assert procs["local"].returncode == 0, procs["local"].stderr
    _doctor_local_history(dirs["local"] / "runs" / "local")
    later = [
        ["run", "--resume", str(dirs["local"] / "runs" / "local"), "federated.rounds=3"],
        ["run", str(dirs["bad"] / "c.yaml"), "federated.clients=3"],
    ]
    procs["local_resume"], procs["bad"] = run_mpi_batch(3, later, work / "np3-later")
    return {"dirs": dirs, "procs": procs}


def _doctor_local_history(run):
    """Make the server's checkpoint after round 2 say Local sampled 3 clients in round 1,
    re-recorded as the run's own (a digest that no longer matched would be a damaged
    file: tests/mpi/test_checkpoint_digests.py), so that the resume checks the history."""
    server_file = run / "checkpoints" / "epoch-0002" / "rank-0.pt"
    state = torch.load(server_file, weights_only=True)
    state["history"][0]["selected"] = [0, 4, 7]
    torch.save(state, server_file)
    manifest_path = server_file.parent.parent / checkpoint.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["2"]["rank-0.pt"] = checkpoint.file_digest(server_file)
    manifest_path.write_text(json.dumps(manifest))


def _comparable(records):
    drop = {"seconds", "train_seconds", "bytes"}  # bytes: what MPI moved, per worker rank
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


def test_fedrep_results_do_not_depend_on_the_rank_count(jobs):
    tmp_path = jobs["dirs"]["rank"]
    procs = {k: jobs["procs"][k] for k in (2, 4, "static", "balanced")}
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
    out = procs[4].stdout
    # train.epochs (set in the static run) is not read by server-based runs: one warning,
    # and the metrics below still agree
    warning = "fedsheaf: warning: fedrep does not read train.epochs (server-based runs count"
    assert procs["static"].stderr.count(warning) == 1 and "warning" not in out
    assert warning not in procs["static"].stdout  # (on standard error)
    assert "10 clients on 3 worker ranks (up to 4 per rank)" in out
    assert "10 clients on 1 worker rank (up to 10 per rank)" in procs[2].stdout
    assert "dynamic placement (every worker holds every client)" in out
    assert "balanced placement (every worker holds every client)" in procs["balanced"].stdout
    assert "static placement" in procs["static"].stdout and "static placement" in procs[2].stdout
    assert out.count("round    1/3") == 1 and out.count("final round  loss") == 1  # rank 0 logs
    m2, m4, ms, mb = (
        read_metrics(tmp_path / "runs" / name / "metrics.jsonl")
        for name in ("np2", "np4", "static", "balanced")
    )
    assert _comparable(m2) == _comparable(m4)
    _check_dynamic_agrees(m4, ms)
    _check_placements_agree(mb, ms)
    assert [r["round"] for r in m4] == [1, 2, 3, 4] and [r["final"] for r in m4][-1]
    assert "acc" not in m4[0] and all("acc" in r for r in m4[1:])  # eval_every=2, eval_last=2
    for r in m4[:ROUNDS]:
        assert len(r["selected"]) == SELECTED and r["selected"] == sorted(r["selected"])
        # the protocol: a body to and from each selected client (reports, evaluation rows
        # and ids are the simulation's own); MPI: a broadcast reaches each of 3 workers
        assert r["bytes_up"] == r["bytes_down"] == SELECTED * 4 * SHARED_BODY
        assert r["bytes"]["params_up"] == r["bytes_up"]
        assert r["bytes"]["params_down"] == 3 * 4 * SHARED_BODY * (1 + (r["round"] == 1))
    final = m4[-1]  # every client fine-tunes its head on the final body; nothing goes up
    assert (final["bytes_up"], final["bytes_down"]) == (0, CLIENTS * 4 * SHARED_BODY)
    for r in m2[:ROUNDS]:  # one worker rank: MPI moves a third as much down, the protocol the same
        assert r["bytes"]["params_down"] == 4 * SHARED_BODY * (1 + (r["round"] == 1))
    summary = json.loads((tmp_path / "runs" / "np4" / "summary.json").read_text())
    assert summary["n_workers"] == 3 and summary["shared_params"] == SHARED_BODY
    assert summary["score_rounds"] == [2, 3]
    assert summary["score"] == pytest.approx((m4[1]["acc"] + m4[2]["acc"]) / 2)
    assert summary["final_acc"] == final["acc"] and len(summary["client_acc"]) == CLIENTS
    assert 0.0 <= summary["score"] <= 1.0
    resolved = yaml.safe_load((tmp_path / "runs" / "np4" / "config.yaml").read_text())
    assert resolved["federated"]["clients"] == CLIENTS and resolved["algorithm"] == "fedrep"


def _check_dynamic_agrees(dynamic, static):
    """Dynamic placement: who trains which client depends on timing, the results do
    not; the server counts each worker's asks and its answers as placement bytes."""
    assert _comparable(dynamic) == _comparable(static)
    workers = 3
    for r, s in zip(dynamic, static, strict=True):
        assert (r["bytes_up"], r["bytes_down"]) == (s["bytes_up"], s["bytes_down"])
        plumbing = {k: v for k, v in r["bytes"].items() if k.startswith("placement")}
        assert {k: v for k, v in r["bytes"].items() if k not in plumbing} == s["bytes"]
        if r["final"]:
            assert not plumbing  # the final round trains every client at home
            continue
        asks = (SELECTED + workers) * 8  # one per client, one "none left" per worker
        sizes = CLIENTS * 2 * 8 if r["round"] == 1 else 0  # [client, n_train], once
        assert plumbing["placement_up"] == asks + sizes
        assert plumbing["placement_down"] == asks + workers * SELECTED * 8  # + where, Bcast
        assert plumbing["placement_between_workers"] == 2 * SELECTED * HEAD * 4


def _check_placements_agree(balanced, static):
    """Balanced and static placement at np=4 (3 workers): the same run, bit for bit;
    only the byte counters differ, by the placement exchanges (not in bytes_up/down)."""
    assert _comparable(balanced) == _comparable(static)
    for b, s in zip(balanced, static, strict=True):
        assert (b["bytes_up"], b["bytes_down"]) == (s["bytes_up"], s["bytes_down"])
        plumbing = {k: v for k, v in b["bytes"].items() if k.startswith("placement")}
        assert {k: v for k, v in b["bytes"].items() if k not in plumbing} == s["bytes"]
        assert not any(k.startswith("placement") for k in s["bytes"])
        if not b["final"]:  # each of 3 workers receives the heads the other two trained
            assert plumbing["placement_between_workers"] == 2 * SELECTED * HEAD * 4
    assert balanced[0]["bytes"]["placement_up"] == CLIENTS * 2 * 8  # [client, n_train], once
    moved = [  # the test means something: some sampled client trained away from home
        place_clients(r["selected"], 3, "balanced", [40] * CLIENTS)
        != place_clients(r["selected"], 3, "static")
        for r in balanced[:ROUNDS]
    ]
    assert any(moved)


def test_fedavg_ft_is_fedavg_plus_a_final_head_round(jobs):
    tmp_path = jobs["dirs"]["ft"]
    procs = {a: jobs["procs"][a] for a in ("fedavg", "fedavg_ft")}
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
    avg, ft = (read_metrics(tmp_path / "runs" / a / "metrics.jsonl") for a in procs)
    assert _comparable(ft[:-1]) == _comparable(avg) and len(avg) == 2  # same rounds
    summary = json.loads((tmp_path / "runs" / "fedavg_ft" / "summary.json").read_text())
    assert summary["shared_params"] == ALL and summary["shared"] == "all"
    assert summary["score"] == summary["final_acc"] == ft[-1]["acc"] and ft[-1]["final"]
    assert summary["acc_last"] == pytest.approx((ft[0]["acc"] + ft[1]["acc"]) / 2)
    assert "local: all x1; final round: head x2" in procs["fedavg_ft"].stdout
    assert ft[0]["bytes"]["params_up"] == SELECTED * 4 * ALL
    plain = json.loads((tmp_path / "runs" / "fedavg" / "summary.json").read_text())
    assert plain["final_acc"] is None and plain["score"] == summary["acc_last"]


def test_fedavg_averages_the_uploads_weighted_by_client_size(jobs):
    """SPEC §4: the new model is Σ n_c w_c / Σ n_c over the round's clients. The clients'
    updates of round 2 are recomputed here, in one process, from the model the server
    saved after round 1; the model it saved after round 2 must be their weighted mean
    (client sizes differ: each class's images are cut into equal shards)."""
    tmp_path = jobs["dirs"]["weighted"]
    cfg = tmp_path / "c.yaml"
    proc = jobs["procs"]["w"]
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "w"
    w1, w2 = (
        torch.load(run / "checkpoints" / f"epoch-000{r}" / "rank-0.pt", weights_only=True)["w"]
        for r in (1, 2)
    )
    selected = read_metrics(run / "metrics.jsonl")[1]["selected"]
    c = load_config(cfg, ["algorithm=fedavg"])
    task = FEDERATED["fedavg"](c.federated).make_task(c)
    cpu = torch.device("cpu")
    data = task.load_clients(selected, cpu)
    runner = task.make_runner(task.build_model(), data, cpu)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank ran (FEDSHEAF_THREADS=1)
    try:
        ups = np.stack([runner.local_update(k, w1.numpy(), 1)[0] for k in selected])
    finally:
        torch.set_num_threads(threads)
    sizes = np.array([data[k].n_train for k in selected], dtype=np.float64)
    assert len(set(sizes)) > 1, sizes  # the weights matter here
    expected = (sizes[:, None] * ups.astype(np.float64)).sum(0) / sizes.sum()
    np.testing.assert_allclose(w2.numpy(), expected, rtol=0, atol=1e-6)
    assert np.abs(ups.astype(np.float64).mean(0) - expected).max() > 1e-4  # ≠ unweighted


def test_local_trains_every_client_every_round_and_shares_nothing(jobs):
    tmp_path = jobs["dirs"]["local"]
    proc = jobs["procs"]["local"]
    assert proc.returncode == 0, proc.stderr
    assert f"{CLIENTS} clients per round" in proc.stdout and "static placement" in proc.stdout
    # the tiny config's fraction (0.3) is not Local's: one warning says so
    assert proc.stderr.count("warning: local does not read federated.fraction") == 1
    records = read_metrics(tmp_path / "runs" / "local" / "metrics.jsonl")
    assert [r["selected"] for r in records] == [list(range(CLIENTS))] * 2
    for r in records:  # the protocol moves nothing; MPI carries reports and evaluations
        assert (r["bytes_up"], r["bytes_down"]) == (0, 0)
        assert r["bytes"]["control_up"] == CLIENTS * 3 * 8
        assert r["bytes"]["metrics_up"] == 4 * 8 * CLIENTS
        assert not any(k.startswith("params") and v for k, v in r["bytes"].items())
    summary = json.loads((tmp_path / "runs" / "local" / "summary.json").read_text())
    assert summary["shared_params"] == 0 and summary["final_acc"] is None
    peaks = summary["memory"]["peak_rss_bytes"]  # the server's, then each worker's
    assert len(peaks) == 3 and min(peaks) > 50e6 and "peak memory " in proc.stdout
    # a Local run begun when Local sampled its clients is not continued differently (the
    # fixture made its round-2 checkpoint say round 1 sampled 3: _doctor_local_history)
    proc = jobs["procs"]["local_resume"]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "round 1 of this run trained 3 clients, but local trains 10 per round" in proc.stderr


@pytest.mark.parametrize(
    "n,overrides,message",
    [
        (1, [], "needs at least 2 ranks (1 server + 1 worker), got 1"),
        (3, ["federated.clients=3"], "federated.clients * federated.classes_per_client = 6"),
    ],
)
def test_bad_setup_gives_one_clear_message(jobs, mpirun, tmp_path, n, overrides, message):
    if n == 3:  # run in the fixture's second np=3 launch, in its own folder
        proc, tmp_path = jobs["procs"]["bad"], jobs["dirs"]["bad"]
    else:
        proc = _run(mpirun, n, _config(tmp_path, shared_data_root()), *overrides)
    assert proc.returncode != 0
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("runs/*/summary.json"))
