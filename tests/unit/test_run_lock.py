"""One job per run directory: the lock a job's writing rank holds (fedsheaf.rundir.run_lock).

Another process holds the lock here: a real job is another process (within one process
two opens of the file would conflict too, which is why a process keeps its one lock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsheaf.rundir import run_lock
from fedsheaf.rundir.files import check_not_foreign
from fedsheaf.util.errors import ConfigError

HOLD = """
import sys
from fedsheaf.rundir import run_lock
assert run_lock.hold(sys.argv[1])
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_run_directory_is_refused_naming_its_holder_until_the_holder_ends(tmp_path):
    other = _holder(tmp_path)
    try:
        with pytest.raises(ConfigError, match="is in use by another job") as refused:
            run_lock.hold(tmp_path)
        assert f"pid {other.pid} on " in str(refused.value)
    finally:
        other.communicate("", timeout=30)  # it ends: the kernel drops its lock
    assert run_lock.hold(tmp_path) and run_lock.hold(tmp_path)  # taken; again: a no-op
    assert run_lock.hold(tmp_path / ".")  # the same directory by another spelling
    assert f"pid {os.getpid()} " in (tmp_path / run_lock.LOCK_FILE).read_text()


def test_a_directory_holding_only_a_lock_is_a_run_directory_not_somebody_elses(tmp_path):
    (tmp_path / run_lock.LOCK_FILE).write_text("pid 1 on elsewhere\n")
    check_not_foreign(tmp_path)  # a run that stopped right after taking its lock
    (tmp_path / run_lock.LOCK_FILE).unlink()
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match="is not a fedsheaf run"):
        check_not_foreign(tmp_path)


def test_a_finished_run_is_read_under_the_lock_so_a_run_finishing_now_is_not_extended(
    tmp_path,
):
    from fedsheaf.config.sections import dump_config, load_config
    from fedsheaf.rundir.lifecycle import claim_run_dir
    from tests.conftest import REPO

    over = [f"output.dir={tmp_path}", "checkpoint.resume=true", "train.epochs=2"]
    cfg = load_config(str(REPO / "configs" / "quickstart.yaml"), over)
    run = tmp_path / cfg.run_name()
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(cfg))
    (run / "summary.json").write_text("{}")
    other = _holder(run)  # the job that wrote summary.json has not ended yet
    try:
        with pytest.raises(ConfigError, match="is in use by another job"):
            claim_run_dir(cfg, run)
    finally:
        other.communicate("", timeout=30)
    note = claim_run_dir(cfg, run)
    assert note is not None and "has already finished its 2 epochs; nothing to do" in note


def test_a_probe_tells_held_from_free_and_a_job_starting_meanwhile_waits_for_it(tmp_path):
    assert run_lock.probe(tmp_path) is None  # no lock file: cannot tell
    other = _holder(tmp_path)
    try:
        assert run_lock.probe(tmp_path) is True
        assert run_lock.holder(tmp_path).startswith(f"pid {other.pid} on ")
    finally:
        other.communicate("", timeout=30)
    assert run_lock.probe(tmp_path) is False
    assert (tmp_path / run_lock.LOCK_FILE).exists()  # the probe changed nothing
    # a reader's shared lock for an instant: the job taking the lock then is not refused
    reader = subprocess.Popen(
        [sys.executable, "-c", PROBING, str(tmp_path / run_lock.LOCK_FILE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline().strip() == "probing"
    assert run_lock.hold(tmp_path)
    reader.wait(timeout=30)


PROBING = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_SH)
print("probing", flush=True)
time.sleep(0.3)  # far longer than a probe holds it, well within PROBE_WAIT
"""


def test_check_refuses_a_run_directory_a_job_holds_as_the_job_would(tmp_path, capsys):
    from fedsheaf.cli import main as cli
    from tests.conftest import REPO

    quick = str(REPO / "configs" / "quickstart.yaml")
    run = tmp_path / "quickstart-sheaf_frl-seed0"
    run.mkdir()
    other = _holder(run)
    try:
        code = cli.main(["check", quick, f"output.dir={tmp_path}", "checkpoint.resume=true"])
    finally:
        other.communicate("", timeout=30)
    assert code == 2
    err = capsys.readouterr().err
    assert f"is in use by another job (pid {other.pid} on " in err
