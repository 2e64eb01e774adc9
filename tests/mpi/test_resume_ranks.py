"""A decentralized run resumed on another rank count (a requeue on a smaller allocation)
ends bitwise as a run never interrupted: 4 -> 2 -> 4 ranks, 4 -> 1, and a damaged file of
a checkpoint whose ranks held several agents found by its digest on the ranks that read
it, every rank then falling back to the checkpoint before."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import read_metrics
from tests.conftest import run_mpi, untimed
from tests.mpi.test_checkpoint_digests import _garble

pytestmark = pytest.mark.mpi
SMALL = ["train.steps_per_epoch=3", "train.eval_every=1", "checkpoint.every=1", "seed=5"]
#: What differs with the launches' rank counts: the ranks themselves and what crossed MPI
#: (the per-edge bytes of the algorithm do not).
PLACED = ("ranks", "agents_per_rank", "mpi_bytes_total")


def _run(n: int, *args: str):
    return run_mpi(n, ["-m", "fedsheaf", "run", *args], timeout=300)


def _resume(n: int, run: Path, epochs: int):
    return _run(n, "--resume", str(run), f"train.epochs={epochs}")


def _together(*jobs):
    with ThreadPoolExecutor(len(jobs)) as pool:
        return [f.result() for f in [pool.submit(job) for job in jobs]]


def _ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _same_as(run: Path, ref: Path) -> None:
    """``run`` ended exactly as ``ref``: every metric, and its summary but for timings,
    memory and the rank counts and MPI bytes of its launches."""
    metrics = [read_metrics(d / "metrics.jsonl") for d in (run, ref)]
    assert [r["epoch"] for r in metrics[0]] == [1, 2, 3]
    assert untimed(metrics[0]) == untimed(metrics[1])
    summaries = [json.loads((d / "summary.json").read_text()) for d in (run, ref)]
    for s in summaries:
        for key in PLACED:
            s.pop(key)
    assert untimed(summaries[0]) == untimed(summaries[1])


def _check(capsys, run: Path, ranks: int) -> str:
    code = cli.main(["check", "--resume", str(run), "-n", str(ranks), "train.epochs=3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.splitlines()[-1]


def test_a_run_resumes_on_other_rank_counts_to_the_same_numbers(tmp_path, capsys):
    def start(name: str, epochs: int, n: int = 4):
        args = ["configs/quickstart.yaml", f"output.dir={tmp_path}", f"output.name={name}"]
        return lambda: _run(n, *args, *SMALL, f"train.epochs={epochs}")

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    for proc in _together(start("ref", 3), start("cut", 1)):
        _ok(proc)
    one = tmp_path / "one"
    shutil.copytree(cut, one)
    # 4 -> 2 ranks (two agents each), and 4 -> 1 (every agent in one process)
    two_out, one_out = _together(lambda: _resume(2, cut, 2), lambda: _resume(1, one, 3))
    assert f"resuming {cut} after epoch 1" in _ok(two_out)
    assert f"resuming {one} after epoch 1" in _ok(one_out)
    _same_as(one, ref)
    manifest = json.loads((cut / "checkpoints" / "latest.json").read_text())
    assert manifest["placement"] == {"1": [[0], [1], [2], [3]], "2": [[0, 1], [2, 3]]}

    # a copy of the 2-rank checkpoint with agent 3's bytes garbled, resumed on 3 ranks
    # ([0, 1], [2], [3]): ranks 1 and 2 read the damaged file, rank 0 does not
    damaged = tmp_path / "damaged"
    shutil.copytree(cut, damaged)
    ckpt = checkpoint.latest(damaged, 3, agents=4)
    assert ckpt is not None and ckpt.epoch == 2
    assert sorted(checkpoint.load_rank(ckpt, 1)["agents"]) == [2, 3]
    _garble(ckpt.rank_file(1))
    # fedsheaf check says what the job will do, for the rank count given
    assert (
        _check(capsys, cut, 4)
        == f"fedsheaf check: would extend the finished run {cut} after epoch 2"
    )
    said = _check(capsys, damaged, 3)
    assert said.startswith(
        f"fedsheaf check: would extend the finished run {damaged} after epoch 1 (the "
        f"checkpoint after epoch 2 cannot be used: checkpoint file {ckpt.rank_file(1)} is "
        "damaged (sha256 mismatch"
    ), said

    # 2 -> 4 ranks, and the damaged copy back to the 4-rank checkpoint, on 3 ranks
    four_out, three_out = _together(lambda: _resume(4, cut, 3), lambda: _resume(3, damaged, 3))
    assert f"resuming {cut} after epoch 2" in _ok(four_out)
    out = _ok(three_out)
    assert (
        f"the checkpoint after epoch 2 cannot be used (checkpoint file {ckpt.rank_file(1)} "
        "is damaged (sha256 mismatch"
    ) in out, out[-2000:]
    assert f"resuming {damaged} after epoch 1" in out
    _same_as(cut, ref)
    _same_as(damaged, ref)
