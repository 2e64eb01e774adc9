"""The stop-request signal handling of ``fedsheaf run`` in one process (the stop itself,
on real ranks: tests/mpi/test_stop_request.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.rundir.lifecycle import leave_note
from fedsheaf.runtime import stop_request


def test_fedsheaf_run_takes_over_sigusr1_before_anything_else():
    before = signal.getsignal(stop_request.SIGNAL)
    try:
        with pytest.raises(SystemExit):
            cli.main(["run", "--help"])  # installed before the arguments are even parsed
        assert signal.getsignal(stop_request.SIGNAL) is stop_request._note
    finally:
        signal.signal(stop_request.SIGNAL, before)


@pytest.mark.parametrize(("checkpoints", "announce"), [(True, True), (False, True), (False, False)])
def test_the_signal_is_noted_or_ignored_with_a_word_and_never_kills(checkpoints, announce):
    program = (
        "import os, signal; from fedsheaf.runtime import stop_request as s; "
        f"s.install(checkpoints={checkpoints}, announce={announce}); "
        "os.kill(os.getpid(), signal.SIGUSR1); print('alive', s.requested())"
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["alive", str(checkpoints)]
    ignored = "SIGUSR1 ignored: this run writes no checkpoints (checkpoint.every=0)"
    assert (ignored in proc.stderr) == (not checkpoints and announce)
    assert announce or proc.stderr == ""


def test_the_note_for_batch_scripts(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(stop_request.NOTE_ENV, raising=False)
    assert leave_note(tmp_path / "run", "epoch", 3) is None  # not asked for
    monkeypatch.setenv(stop_request.NOTE_ENV, str(tmp_path / "job.stopped"))
    assert leave_note(tmp_path / "run", "round", 7) == tmp_path / "job.stopped"
    assert json.loads((tmp_path / "job.stopped").read_text()) == {
        "run_dir": str(tmp_path / "run"),
        "round": 7,
    }
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(stop_request.NOTE_ENV, str(tmp_path / "file" / "job.stopped"))
    assert leave_note(tmp_path / "run", "epoch", 3) is None  # cannot: a warning
    assert "warning: cannot write FEDSHEAF_STOPPED_FILE=" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "status"),
    [({"OMPI_COMM_WORLD_RANK": "3"}, 0), ({"SLURM_PROCID": "0"}, 0), ({}, 75)],
)
def test_a_planned_stop_exits_0_under_a_launcher_and_75_alone(monkeypatch, env, status):
    """Under mpiexec or srun a non-zero exit reads as a crash (Open MPI's "prterun detected
    that one or more processes exited with non-zero status" banner): the ranks of a
    launched job leave with 0 (stopped.json says it); a process alone keeps 75."""
    from fedsheaf.util.log import RANK_VARIABLES

    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert stop_request.exit_status() == status
