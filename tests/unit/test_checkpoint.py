"""Checkpoint files, the manifest protocol, and bitwise resume of one agent (no MPI)."""

from __future__ import annotations

import hashlib
import json
import re
import time

import pytest
import torch

from fedsheaf.algorithms import DECENTRALIZED
from fedsheaf.algorithms.base import Agent, Arrived
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.graphs import Graph
from fedsheaf.models.seeded import rng_state, set_rng_state
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from fedsheaf.runtime import experiment
from fedsheaf.util.errors import CheckpointError

torch.set_num_threads(1)


def _save_all(run, epoch, n, keep=2):
    for r in range(n):
        checkpoint.save_rank(run, epoch, r, {"value": torch.tensor([epoch, r])})
    return checkpoint.commit(run, epoch, n, keep)


def test_commit_keeps_the_newest_and_latest_finds_them(tmp_path):
    assert checkpoint.latest(tmp_path, 3) is None
    for epoch in range(1, 5):
        _save_all(tmp_path, epoch, 3)
    dirs = sorted(p.name for p in (tmp_path / "checkpoints").glob("epoch-*"))
    assert dirs == ["epoch-0003", "epoch-0004"]
    ckpt = checkpoint.latest(tmp_path, 3)
    assert ckpt.epoch == 4 and ckpt.n_ranks == 3
    state = checkpoint.load_rank(ckpt, 2)
    assert state["epoch"] == 4 and state["rank"] == 2 and state["value"].tolist() == [4, 2]
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["epochs"] == [3, 4]
    assert not list(tmp_path.rglob(".*"))  # no temp files left behind
    _save_all(tmp_path, 6, 3, keep=1)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("epoch-*")) == ["epoch-0006"]


def test_incomplete_checkpoints_are_never_used(tmp_path):
    _save_all(tmp_path, 1, 2)
    _save_all(tmp_path, 2, 2)
    # a job killed while writing epoch 3: some rank files, no manifest entry
    checkpoint.save_rank(tmp_path, 3, 0, {})
    assert checkpoint.latest(tmp_path, 2).epoch == 2
    # a listed checkpoint that lost a rank file falls back to the older one
    checkpoint.rank_file(tmp_path, 2, 1).unlink()
    assert checkpoint.latest(tmp_path, 2).epoch == 1
    # committing epoch 3 later keeps the partial folder's newest files and prunes epoch 1
    checkpoint.save_rank(tmp_path, 3, 1, {})
    checkpoint.commit(tmp_path, 3, 2)
    assert checkpoint.latest(tmp_path, 2).epoch == 3
    assert not checkpoint.epoch_dir(tmp_path, 1).exists()


class DiskFull:
    """Pickling this fails, as a full disk would, once torch.save has begun its file
    (it has written the archive's first records by then)."""

    def __reduce__(self):
        raise OSError("disk full")


def test_a_failed_save_leaves_no_partial_file(tmp_path):
    _save_all(tmp_path, 1, 1)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_rank(tmp_path, 2, 0, {"weights": torch.ones(100_000), "x": DiskFull()})
    assert list(checkpoint.epoch_dir(tmp_path, 2).iterdir()) == []
    assert checkpoint.latest(tmp_path, 1).epoch == 1


@pytest.mark.parametrize(
    "text", ["{", "[]", '{"epochs": [1], "n_ranks": "2"}', '{"epochs": ["x"], "n_ranks": 2}']
)
def test_bad_manifest_is_a_clear_error(tmp_path, text):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest.json").write_text(text)
    with pytest.raises(CheckpointError, match="latest.json is (unreadable|malformed)") as bad:
        checkpoint.latest(tmp_path, 2)
    assert str(bad.value).endswith("or start the run over with output.overwrite=true)")


def test_other_rank_count_and_damaged_files_are_clear_errors(tmp_path):
    ckpt = _save_all(tmp_path, 1, 2)
    with pytest.raises(CheckpointError, match="hold 2 ranks but this job has 4"):
        checkpoint.latest(tmp_path, 4)
    good = ckpt.rank_file(0).read_bytes()
    legacy = checkpoint.Checkpoint(tmp_path, 1, 2)  # as named by a manifest without digests
    for junk in (b"not a torch file", b"garbage\n" * 10, good[:100], b""):
        ckpt.rank_file(1).write_bytes(junk)
        with pytest.raises(CheckpointError, match="rank-1.pt is truncated"):
            checkpoint.load_rank(ckpt, 1)  # its digest finds it first
        with pytest.raises(CheckpointError) as err:
            checkpoint.load_rank(legacy, 1)
        # one line, and none of torch's advice to load it without weights_only
        said = str(err.value)
        assert said.startswith(
            f"checkpoint file {ckpt.rank_file(1)} cannot be read: it is damaged or "
            "truncated, or not a checkpoint fedsheaf wrote ("
        )
        assert "\n" not in said and "weights_only" not in said, said
    ckpt.rank_file(1).write_bytes(ckpt.rank_file(0).read_bytes())
    with pytest.raises(CheckpointError, match="does not hold rank 1, epoch 1"):
        checkpoint.load_rank(legacy, 1)
    torch.save({"epoch": 1}, ckpt.rank_file(1))
    with pytest.raises(CheckpointError, match="not a fedsheaf checkpoint"):
        checkpoint.load_rank(legacy, 1)


def test_fresh_start_refuses_an_unfinished_run(tmp_path):
    checkpoint.refuse_unfinished(tmp_path / "new")
    _save_all(tmp_path, 1, 1)
    with pytest.raises(CheckpointError, match="unfinished run.*--resume"):
        checkpoint.refuse_unfinished(tmp_path)
    checkpoint.delete_checkpoints(tmp_path)
    assert not (tmp_path / "checkpoints").exists()
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(CheckpointError, match="unfinished run"):
        checkpoint.refuse_unfinished(tmp_path)
    (tmp_path / "summary.json").write_text("{}")
    checkpoint.refuse_unfinished(tmp_path)  # RunDir reports finished runs


def test_rewrite_metrics_keeps_exactly_the_given_records(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 2}\n{"epoch": 3, "tor')
    records = [{"epoch": 1, "loss": float("nan"), "agents": [{"comm_by_neighbour": {2: 0.5}}]}]
    checkpoint.rewrite_metrics(path, records)
    assert read_metrics(path) == [
        {"epoch": 1, "loss": None, "agents": [{"comm_by_neighbour": {"2": 0.5}}]}
    ]
    checkpoint.rewrite_metrics(path, [])
    assert path.read_text() == ""


def test_a_resume_forgets_the_checkpoints_it_could_not_use(tmp_path):
    for epoch in (8, 10):
        checkpoint.commit(tmp_path, epoch, 1, keep=2)
    checkpoint.forget_after(tmp_path, 10)  # nothing after it: unchanged
    assert [c.epoch for c in checkpoint.complete(tmp_path, 1)] == []  # no rank files here
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["epochs"] == [8, 10] and manifest["epoch"] == 10
    checkpoint.forget_after(tmp_path, 8)  # 10 was damaged: the resume read 8
    checkpoint.commit(tmp_path, 12, 1, keep=2)
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["epochs"] == [8, 12] and manifest["epoch"] == 12


def _garble_tensor(path, tensor) -> None:
    """Flip bytes in the middle of ``tensor``'s data inside checkpoint file ``path`` (the
    archive stores it uncompressed), as a failing disk or copy would."""
    data = bytearray(path.read_bytes())
    raw = tensor.numpy().tobytes()
    at = data.find(raw)
    assert at > 0
    middle = at + len(raw) // 2
    data[middle : middle + 4] = bytes(b ^ 0x5A for b in data[middle : middle + 4])
    path.write_bytes(bytes(data))


def test_every_rank_file_is_committed_with_its_digest_and_checked_before_it_is_read(tmp_path):
    weights = torch.linspace(-1, 1, 2000)
    for epoch in (1, 2):
        for rank in range(2):
            checkpoint.save_rank(tmp_path, epoch, rank, {"w": weights * (rank + 1)})
        ckpt = checkpoint.commit(tmp_path, epoch, 2)
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    for epoch in (1, 2):
        for rank in range(2):
            data = checkpoint.rank_file(tmp_path, epoch, rank).read_bytes()
            assert manifest["files"][str(epoch)][f"rank-{rank}.pt"] == {
                "sha256": hashlib.sha256(data).hexdigest(),  # hashed as torch wrote it
                "bytes": len(data),
            }
    assert ckpt.files == manifest["files"]["2"]
    # bytes garbled inside a tensor: torch reads the file without a word ...
    path = ckpt.rank_file(1)
    good = path.read_bytes()
    _garble_tensor(path, weights * 2)
    silently = torch.load(path, map_location="cpu", weights_only=True)["w"]
    assert not torch.equal(silently, weights * 2)
    # ... the digest does not
    with pytest.raises(CheckpointError) as damaged:
        checkpoint.load_rank(checkpoint.latest(tmp_path, 2), 1)
    assert str(damaged.value) == (
        f"checkpoint file {path} is damaged (sha256 mismatch: its bytes changed since it "
        "was written)"
    )
    path.write_bytes(good[:-10])
    with pytest.raises(CheckpointError, match=rf"rank-1.pt is truncated \({len(good) - 10} of"):
        checkpoint.load_rank(ckpt, 1)
    path.write_bytes(good + b"\0")
    with pytest.raises(CheckpointError, match=rf"is damaged \({len(good) + 1} bytes, not the"):
        checkpoint.load_rank(ckpt, 1)
    path.unlink()
    with pytest.raises(CheckpointError, match=r"epoch-0002/rank-1.pt is missing$"):
        checkpoint.load_rank(ckpt, 1)
    # a listed checkpoint that lost a file is named (for a resume to say so), not left out
    assert [c.epoch for c in checkpoint.listed(tmp_path, 2)] == [2, 1]
    assert [c.epoch for c in checkpoint.complete(tmp_path, 2)] == [1]
    path.write_bytes(good)
    assert torch.equal(checkpoint.load_rank(ckpt, 1)["w"], weights * 2)
    # digests follow the epochs the manifest keeps
    checkpoint.forget_after(tmp_path, 1)
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["epochs"] == [1] and list(manifest["files"]) == ["1"]
    for rank in range(2):
        checkpoint.save_rank(tmp_path, 3, rank, {})
    checkpoint.commit(tmp_path, 3, 2, keep=1)
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["epochs"] == [3] and list(manifest["files"]) == ["3"]


def test_a_manifest_from_before_digests_loads_as_it_is(tmp_path):
    weights = torch.linspace(-1, 1, 2000)
    checkpoint.save_rank(tmp_path, 1, 0, {"w": weights})
    checkpoint.commit(tmp_path, 1, 1)
    manifest = tmp_path / "checkpoints" / "latest.json"
    old = json.loads(manifest.read_text())
    del old["files"]
    manifest.write_text(json.dumps(old))
    ckpt = checkpoint.latest(tmp_path, 1)
    assert ckpt.files is None
    assert torch.equal(checkpoint.load_rank(ckpt, 0)["w"], weights)
    for files in ('"x"', '{"1": {"rank-0.pt": {"sha256": 3}}}'):
        manifest.write_text(json.dumps(old)[:-1] + f', "files": {files}}}')
        with pytest.raises(CheckpointError, match="latest.json is malformed"):
            checkpoint.latest(tmp_path, 1)


def _agent(i: int) -> dict:
    """An agent's part of a checkpoint (as LocalAgents.state writes it)."""
    return {"algorithm": {"w": torch.full((500,), float(i))}, "bytes_total": {i: 10 * i}}


def _save_placed(run, epoch, placement, keep=2, record=True):
    """A decentralized run's checkpoint after ``epoch`` with its agents on ranks as in
    ``placement`` (one agent per rank: that agent's part as the file; several: "agents");
    rank 0's file carries the history and clock."""
    files = []
    for rank, block in enumerate(placement):
        if len(placement) == sum(map(len, placement)):
            state = _agent(block[0])
        else:
            state = {"agents": {i: _agent(i) for i in block}}
        if rank == 0:
            state.update(history=[{"epoch": e} for e in range(1, epoch + 1)], wall_seconds=1.5)
        files.append(checkpoint.save_rank(run, epoch, rank, state))
    return checkpoint.commit(
        run, epoch, len(placement), keep, files=files, placement=placement if record else None
    )


def _same(part, i) -> bool:
    return torch.equal(part["algorithm"]["w"], _agent(i)["algorithm"]["w"]) and part[
        "bytes_total"
    ] == {i: 10 * i}


def test_the_manifest_records_the_placement_and_any_rank_count_reads_it(tmp_path):
    four, two = ((0,), (1,), (2,), (3,)), ((0, 1), (2, 3))
    _save_placed(tmp_path, 1, four)
    written = _save_placed(tmp_path, 2, two)
    assert written.placement == two and written.n_ranks == 2
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["placement"] == {"1": [[0], [1], [2], [3]], "2": [[0, 1], [2, 3]]}
    assert manifest["n_ranks"] == 2 and list(manifest["files"]["2"]) == ["rank-0.pt", "rank-1.pt"]
    # a decentralized run of 4 agents reads them on any rank count; each checkpoint keeps
    # its own rank count and placement
    for ranks in (1, 2, 3, 4):
        found = checkpoint.listed(tmp_path, ranks, agents=4)
        assert [(c.epoch, c.n_ranks, c.placement) for c in found] == [(2, 2, two), (1, 4, four)]
    # other families (no agent count): only the rank count that wrote the newest
    with pytest.raises(CheckpointError, match="its checkpoints hold 2 ranks but this job has 4"):
        checkpoint.listed(tmp_path, 4)
    with pytest.raises(CheckpointError, match="hold 4 agents but this run has 5"):
        checkpoint.listed(tmp_path, 4, agents=5)
    newest, older = checkpoint.listed(tmp_path, 4, agents=4)
    # 2 -> 4 ranks: rank 3 reads agent 3 from rank 1's file; rank 0 also gets the history
    assert list(checkpoint.read_agents(newest, [3], root=False)) == ["agents"]
    assert _same(checkpoint.read_agents(newest, [3], root=False)["agents"][3], 3)
    on_root = checkpoint.read_agents(newest, [0], root=True)
    assert _same(on_root["agents"][0], 0) and on_root["wall_seconds"] == 1.5
    assert [r["epoch"] for r in on_root["history"]] == [1, 2]
    # 4 -> 1: every agent, from four one-agent files (without their header and history)
    alone = checkpoint.read_agents(older, [0, 1, 2, 3], root=True)
    assert sorted(alone["agents"]) == [0, 1, 2, 3]
    assert all(_same(alone["agents"][i], i) and len(alone["agents"][i]) == 2 for i in range(4))
    assert [r["epoch"] for r in alone["history"]] == [1]
    # the same layout: this rank's own file, as it is (today's format)
    assert checkpoint.read_agents(newest, [2, 3], root=False)["rank"] == 1
    assert checkpoint.read_agents(older, [2], root=False)["rank"] == 2
    # complete: every file the checkpoint was written with, whatever the job's count now
    checkpoint.rank_file(tmp_path, 1, 3).unlink()
    assert [c.epoch for c in checkpoint.complete(tmp_path, 4, agents=4)] == [2]
    checkpoint.rank_file(tmp_path, 2, 1).unlink()
    assert checkpoint.complete(tmp_path, 1, agents=4) == []
    # placements follow the epochs the manifest keeps
    checkpoint.forget_after(tmp_path, 1)
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert list(manifest["placement"]) == ["1"]


def test_a_damaged_agent_file_is_refused_by_the_ranks_that_read_it(tmp_path):
    ckpt = _save_placed(tmp_path, 1, ((0, 1), (2, 3)))
    path = ckpt.rank_file(1)
    _garble_tensor(path, _agent(3)["algorithm"]["w"])
    for agents, root in (([3], False), ([1, 2], False), ([0, 1, 2, 3], True)):
        with pytest.raises(CheckpointError, match=rf"{path} is damaged \(sha256 mismatch"):
            checkpoint.read_agents(ckpt, agents, root)
    assert _same(checkpoint.read_agents(ckpt, [1], root=True)["agents"][1], 1)  # not read
    # a file that does not hold an agent its manifest says it holds
    torch_state = {"agents": {2: _agent(2)}}
    files = [checkpoint.save_rank(tmp_path, 2, r, torch_state) for r in range(2)]
    ckpt = checkpoint.commit(tmp_path, 2, 2, files=files, placement=((0, 1), (2, 3)))
    with pytest.raises(CheckpointError, match=r"epoch-0002/rank-0.pt does not hold agent 0$"):
        checkpoint.read_agents(ckpt, [0], root=True)


def test_a_manifest_without_placements_held_one_agent_per_rank(tmp_path):
    one_each = ((0,), (1,), (2,), (3,))
    _save_placed(tmp_path, 1, one_each, record=False)  # as written before placements
    assert "placement" not in json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    (older,) = checkpoint.listed(tmp_path, 2, agents=4)
    assert older.placement == one_each and older.n_ranks == 4
    assert sorted(checkpoint.read_agents(older, [0, 1], root=True)["agents"]) == [0, 1]
    # the next commit, on another rank count, records what the older epoch held
    _save_placed(tmp_path, 2, ((0, 1), (2, 3)))
    manifest = json.loads((tmp_path / "checkpoints" / "latest.json").read_text())
    assert manifest["placement"]["1"] == [[0], [1], [2], [3]] and manifest["epochs"] == [1, 2]
    # agents shared ranks, unrecorded: only that rank count can read it (its own files)
    other = tmp_path / "shared"
    _save_placed(other, 1, ((0, 1), (2, 3)), record=False)
    (same,) = checkpoint.listed(other, 2, agents=4)
    assert same.placement is None and same.n_ranks == 2
    with pytest.raises(CheckpointError, match="its checkpoints hold 2 ranks but this job has 3"):
        checkpoint.listed(other, 3, agents=4)
    # a placement that does not place agents 0..N-1 once each is a malformed manifest
    manifest = other / "checkpoints" / "latest.json"
    for bad in ('{"1": [[0, 1], [1, 3]]}', '{"1": [[0], []]}', '{"1": [["0"]]}', "[]"):
        record = json.loads(manifest.read_text())
        manifest.write_text(json.dumps(record)[:-1] + f', "placement": {bad}}}')
        with pytest.raises(CheckpointError, match="latest.json is malformed"):
            checkpoint.listed(other, 2, agents=4)
        manifest.write_text(json.dumps(record))


def test_starting_over_deletes_only_the_checkpoint_files_fedsheaf_wrote(tmp_path):
    _save_all(tmp_path, 1, 2)
    _save_all(tmp_path, 2, 2)
    theirs = {
        tmp_path / "checkpoints" / "lightning-epoch=99.ckpt": b"theirs",
        tmp_path / "checkpoints" / "epoch-0002" / "notes.txt": b"mine",
    }
    for f, data in theirs.items():
        f.write_bytes(data)
    _save_all(tmp_path, 3, 2, keep=1)  # prunes epoch 1 whole, of epoch 2 its rank files
    assert not checkpoint.epoch_dir(tmp_path, 1).exists()
    assert [p.name for p in checkpoint.epoch_dir(tmp_path, 2).iterdir()] == ["notes.txt"]
    checkpoint.delete_checkpoints(tmp_path)
    left = sorted(p for p in (tmp_path / "checkpoints").rglob("*") if p.is_file())
    assert left == sorted(theirs) and all(f.read_bytes() == d for f, d in theirs.items())


def test_unevaluated_lists_the_reached_epochs_without_an_evaluation():
    # a run of 10 epochs evaluated every 4 (and at its end), stopped after epoch 7
    records = [{"epoch": e, **({"private_acc": 0.5} if e % 4 == 0 else {})} for e in range(1, 8)]
    assert checkpoint.unevaluated(records, range(7, 8), "epoch", "private_acc") == [7]
    assert checkpoint.unevaluated(records, range(8, 9), "epoch", "private_acc") == []  # to train
    assert checkpoint.unevaluated(records, range(4, 5), "epoch", "private_acc") == []
    assert checkpoint.unevaluated(records, range(3, 10), "epoch", "private_acc") == [3, 5, 6, 7]
    # rounds: the final fine-tuning record (numbered after the last round) is not a round
    rounds = [{"round": 1, "acc": 0.1}, {"round": 2}, {"round": 3, "final": True}]
    assert checkpoint.unevaluated(rounds, range(1, 4), "round", "acc") == [2]
    assert checkpoint.unevaluated([], range(1, 4), "round", "acc") == []


def test_the_wall_clock_continues_the_count_of_the_checkpoint_it_resumed_from():
    fresh = checkpoint.WallClock()
    fresh.resumed(None)  # no checkpoint: nothing before
    assert fresh.before == 0.0 and "in all" not in fresh.describe()
    old = checkpoint.WallClock()
    old.resumed({"algorithm": {}})  # a checkpoint from before the count: nothing either
    assert old.before == 0.0
    clock = checkpoint.WallClock()
    clock.resumed({checkpoint.WallClock.KEY: 100.0})
    launch = clock.this_launch()
    assert 100.0 + launch <= clock.total() <= 100.0 + clock.this_launch()
    assert re.fullmatch(r"1\d\d\.\ds in all, \d+\.\ds in this launch", clock.describe())
    total = clock.stop()  # what the summary says and the closing line prints
    said = clock.describe()
    time.sleep(0.2)  # stopped: later calls say the same
    assert clock.total() == total and clock.describe() == said


@pytest.mark.parametrize("n,expected", [(0, []), (3, [3, 6, 9]), (4, [4, 8])])
def test_due(n, expected):
    assert [e for e in range(1, 11) if checkpoint.due(e, n)] == expected
    # the last epoch too, so that a finished run can be extended from its end
    assert [e for e in range(1, 11) if checkpoint.due(e, n, last=10)] == sorted(
        set(expected) | ({10} if n else set())
    )


# ---- one agent, resumed bitwise ----------------------------------------------
class EchoNeighbour:
    """A stand-in neighbour (agent 1, same d) that answers with a fixed rotation of
    whatever it is sent: deterministic, stateless, and enough to exercise maps."""

    neighbours = [1]

    def __init__(self, d: int) -> None:
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))
        self.q = q

    def exchange(self, mat, shapes=None, device=None):
        mat = mat.detach()
        rotate = shapes is not None and mat.shape[0] == len(self.q)  # a d × K pilot matrix
        return [self.q @ mat if rotate else mat.clone()]

    def exchange_each(self, mats, shapes=None, device=None):
        return [m.detach().clone() for m in mats]

    def start_exchange(self, mat, shapes=None, device=None):
        return Arrived(self.exchange(mat, shapes, device))

    def start_exchange_each(self, mats, shapes=None, device=None):
        return Arrived(self.exchange_each(mats, shapes, device))

    def take_round_bytes(self):
        return {1: 0}


class Collect:
    def __init__(self) -> None:
        self.records = []

    def epoch(self, record):
        self.records.append({k: v for k, v in record.items() if k != "seconds"})


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def setup():
    agent = {"encoder": [6, 8], "head": [16], "dropout": 0.3, "classes": [0, 1, 2, 3, 4]}
    raw = {
        "name": "one",
        "graph": "unused.yaml",
        "agents": [agent, agent],
        "data": {"limit": 600},
        "sheaf": {"pilot_batch": 16},
        "train": {"epochs": 5, "steps_per_epoch": 3, "eval_every": 2, "batch_size": 16},
    }
    graph = Graph("pair", dims=(8, 8), edges=((0, 1),))
    return raw, graph


def _algorithm(setup, name="sheaf_frl", sheaf=None, **train):
    raw, graph = setup
    raw = {**raw, "train": {**raw["train"], **train}, "sheaf": {**raw["sheaf"], **(sheaf or {})}}
    cfg = build(ExperimentConfig, {**raw, "algorithm": name})
    ds, part = experiment.load_and_partition(cfg)
    cpu = torch.device("cpu")
    data = experiment.agent_data(ds, part, 0, cpu)
    model = experiment.agent_model(cfg, ds, 0, cpu)
    agent = Agent(0, cfg, graph, data, model, cpu, cfg.train.steps_per_epoch)
    return DECENTRALIZED[name](agent, EchoNeighbour(8), Collect())


def _params(algo):
    return [t.clone() for t in algo.model.state_dict().values()]


@pytest.mark.parametrize(
    "name,sheaf",
    [
        ("sheaf_frl", {}),
        ("sheaf_frl", {"map_refresh": "step"}),
        ("sheaf_frl", {"variant": "homogeneous"}),
        # (a key file, so that the uninterrupted run draws the same secret: see
        # tests/unit/test_strict_privacy.py for the default, OS-drawn secrets)
        ("sheaf_frl", {"variant": "strict", "mask_secret": "file"}),
        ("noncoop", {}),
        ("comfed", {}),
        ("sheaf_fmtl", {}),
    ],
)
def test_resumed_agent_matches_an_uninterrupted_one(setup, tmp_path, name, sheaf):
    if sheaf.get("mask_secret") == "file":
        (tmp_path / "keys").mkdir()
        (tmp_path / "keys" / "agent-0.key").write_bytes(bytes(range(32)))
        sheaf = {**sheaf, "mask_secret_dir": str(tmp_path / "keys")}
    straight = _algorithm(setup, name, sheaf)
    straight.run()

    def save_then_stop(done):
        checkpoint.save_rank(tmp_path, done, 0, {"algorithm": first.state_dict()})
        checkpoint.commit(tmp_path, done, 1)
        if done == 3:
            raise Stop

    first = _algorithm(setup, name, sheaf)
    with pytest.raises(Stop):
        first.run(0, save_then_stop)
    # what a fresh process does: new model and optimizer, then the saved state
    resumed = _algorithm(setup, name, sheaf)
    ckpt = checkpoint.latest(tmp_path, 1)
    assert ckpt.epoch == 3
    resumed.load_state_dict(checkpoint.load_rank(ckpt, 0)["algorithm"])
    resumed.run(ckpt.epoch)
    assert first.reporter.records + resumed.reporter.records == straight.reporter.records
    assert all(torch.equal(a, b) for a, b in zip(_params(straight), _params(resumed), strict=True))
    if isinstance(straight, SheafFRL):
        assert resumed.maps.keys() == straight.maps.keys()
        assert all(torch.equal(resumed.maps[j], straight.maps[j]) for j in straight.maps)

    # the test has teeth: without the dropout generator's state the run differs
    again = _algorithm(setup, name, sheaf)
    state = checkpoint.load_rank(ckpt, 0)["algorithm"]
    again.load_state_dict({**state, "rng": rng_state(again.model)})
    again.run(ckpt.epoch)
    assert again.reporter.records != straight.reporter.records[3:]


def test_resume_keeps_the_configured_learning_rate(setup):
    first = _algorithm(setup)
    state = first.state_dict()
    later = _algorithm(setup, lr=0.5)
    later.load_state_dict(state)
    assert [g["lr"] for g in later.optimizer.param_groups] == [0.5]


def test_sheaf_window_and_maps_round_trip(setup, tmp_path):
    algo = _algorithm(setup)
    algo.maps = {1: torch.eye(8)}
    algo.window.add(1, torch.randn(8, 5), torch.randn(8, 5))
    checkpoint.save_rank(tmp_path, 1, 0, {"algorithm": algo.state_dict()})
    other = _algorithm(setup)
    other.load_state_dict(
        checkpoint.load_rank(checkpoint.Checkpoint(tmp_path, 1, 1), 0)["algorithm"]
    )
    assert torch.equal(other.maps[1], torch.eye(8))
    assert torch.equal(other.window.cross(1), algo.window.cross(1))
    assert other.window.samples(1) == 5


def test_a_checkpoint_of_another_model_is_a_clear_error(setup, tmp_path):
    algo = _algorithm(setup)
    state = algo.state_dict()
    state["model"] = {k: v[..., :1] if v.ndim else v for k, v in state["model"].items()}
    with pytest.raises(CheckpointError, match="agent 0: checkpoint does not fit"):
        algo.load_state_dict(state)


def test_dropout_state_from_another_device_type_is_a_clear_error():
    from fedsheaf.models.seeded import GeneratorDropout

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), GeneratorDropout(0.5))
    model[1].generator = torch.Generator().manual_seed(0)
    set_rng_state(model, rng_state(model))  # same device: fine
    cuda_like = torch.zeros(16, dtype=torch.uint8)  # a CUDA generator's state: seed, offset
    with pytest.raises(
        CheckpointError,
        match=r"state \(16 bytes\) does not fit this rank's cpu generator .* another device type",
    ):
        set_rng_state(model, [cuda_like])
