"""``output.tensorboard=true``: metrics records as TensorBoard scalars, read back with
TensorBoard's own reader; resuming rewrites no step twice; refused without the package."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.config.sections import load_config
from fedsheaf.rundir.files import RunDir
from fedsheaf.rundir.preflight import check_run_path
from fedsheaf.rundir.tensorboard import Board, event_files, scalars
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
QUICK = REPO / "configs" / "quickstart.yaml"


def read_events(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Tag -> (step, value) of every scalar TensorBoard shows for ``run``'s tb/."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(run / "tb"))
    acc.Reload()
    return {t: [(s.step, s.value) for s in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def network(epoch: int, loss: float, evaluated: bool = True) -> dict:
    rec = {"epoch": epoch, "loss": loss, "seconds": 0.5, "bytes_sent": 1000 * epoch}
    if evaluated:
        rec.update(
            private_acc=0.5,
            comm_acc=0.25,
            comm_acc_deg=0.3,
            score_val=0.4,
            eval_bytes_sent=700,
        )
    rec["agents"] = [
        {"agent": a, "epoch": epoch, "loss": loss, "private_acc": 0.1 * (a + 1), "comm_acc": 0.2}
        for a in range(3)
    ]
    if not evaluated:
        for a in rec["agents"]:
            del a["private_acc"], a["comm_acc"]
    return rec


def test_a_network_record_gives_the_documented_tags():
    got = scalars(network(3, 0.75))
    assert got["loss"] == 0.75 and got["time/seconds"] == 0.5
    assert got["accuracy/private"] == 0.5 and got["accuracy/comm"] == 0.25
    assert got["accuracy/comm_degree_weighted"] == 0.3 and got["validation/score"] == 0.4
    assert got["bytes/sent"] == 3000 and got["bytes/eval_sent"] == 700
    assert [got[f"agents/private/{a}"] for a in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert got["agents/comm/2"] == 0.2 and got["agents/loss/1"] == 0.75
    assert "epoch" not in got and not any(t.startswith("extra/") for t in got)
    lonely = {"epoch": 1, "loss": 1.0, "comm_acc": math.nan, "comm_acc_deg": None}
    assert scalars(lonely) == {"loss": 1.0}  # no neighbour: no communication accuracy


def test_a_server_record_and_its_final_round():
    rec = {"round": 4, "final": False, "loss": 0.5, "acc": 0.6, "acc_min": 0.2}
    rec.update(bytes_up=10, bytes_down=20, client_acc=[0.5, 0.7], selected=[0, 1])
    rec.update(bytes={"params_up": 10}, gram_err_star=1e-3)
    got = scalars(rec)
    assert got["accuracy/mean"] == 0.6 and got["accuracy/min"] == 0.2
    assert got["bytes/up"] == 10 and got["bytes/down"] == 20
    assert got["clients/accuracy/1"] == 0.7 and got["extra/gram_err_star"] == 1e-3
    assert "selected" not in str(got) and "round" not in got
    final = scalars({"round": 5, "final": True, "acc": 0.9})
    assert final == {"after_fine_tuning/accuracy/mean": 0.9}


def test_events_read_back_and_a_resume_writes_no_step_twice(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    board = Board(run, "epoch", 1)
    for epoch in (1, 2, 3):  # epoch 3 is past the checkpoint (after 2) the run resumes from
        board.write(network(epoch, loss=1.0 / epoch, evaluated=epoch != 1))
    board.close()
    first = read_events(run)
    assert [s for s, _ in first["loss"]] == [1, 2, 3]
    assert [s for s, _ in first["accuracy/private"]] == [2, 3]  # evaluated epochs only

    board = Board(run, "epoch", 3)  # resumed after epoch 2
    for epoch in (3, 4):
        board.write(network(epoch, loss=10.0 + epoch))
    board.close()
    assert len(event_files(run / "tb")) == 2  # appended, the first launch's file kept
    events = read_events(run)
    assert events["loss"] == [(1, 1.0), (2, 0.5), (3, 13.0), (4, 14.0)]
    evaluated = {"accuracy/private": [2, 3, 4], "agents/private/2": [2, 3, 4]}
    for tag in ("accuracy/private", "agents/private/2", "bytes/sent", "agents/loss/0"):
        assert [s for s, _ in events[tag]] == evaluated.get(tag, [1, 2, 3, 4]), tag
    assert events["agents/private/2"][-1][1] == pytest.approx(0.3)


def test_tensorboard_turned_on_when_resuming_gets_the_earlier_records(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    history = [network(1, 1.0), network(2, 0.5), network(3, 0.25)]  # (3: past the checkpoint)
    board = Board(run, "epoch", 3, history[:2])
    board.write(network(3, 0.3))
    board.close()
    assert read_events(run)["loss"] == [(1, 1.0), (2, 0.5), (3, pytest.approx(0.3))]


def test_an_overwrite_removes_the_replaced_runs_events(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    RunDir(run).write_config(QUICK.read_text())
    board = Board(run, "epoch", 1)
    board.write(network(1, 1.0))
    board.close()
    (run / "tb" / "notes.txt").write_text("mine")
    time.sleep(0.01)
    RunDir(run, overwrite=True)
    assert event_files(run / "tb") == [] and (run / "tb" / "notes.txt").is_file()


def test_the_key_is_refused_without_the_package(tmp_path, monkeypatch, capsys):
    cfg = load_config(QUICK, [f"output.dir={tmp_path}", "output.tensorboard=true"])
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as where it is not installed
    with pytest.raises(ConfigError, match=r"pip install 'fedsheaf\[tensorboard\]'"):
        check_run_path(cfg, tmp_path / cfg.run_name(), hold=False)
    code = cli.main(["check", str(QUICK), f"output.dir={tmp_path}", "output.tensorboard=true"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "output.tensorboard=true needs the tensorboard package" in err
    assert not any(tmp_path.iterdir())


def test_the_key_is_off_by_default_and_accepted_where_the_package_is():
    assert load_config(QUICK, []).output.tensorboard is False
    pytest.importorskip("tensorboard")
    cfg = load_config(QUICK, ["output.tensorboard=true"])
    assert cfg.output.tensorboard is True
