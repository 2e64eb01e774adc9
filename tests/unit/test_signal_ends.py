"""SIGTERM on a rank (fedsheaf.runtime.world.install_signal_ends), in real processes (MPI
singletons): the rank ends by the signal, saying so once in failed.json and on standard
error, unless its run has already ended on purpose (stopped on request, finished)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, mpi_env

RANK = """
import os, signal, sys
from pathlib import Path
from fedsheaf.runtime import world
world.install_signal_ends()
run = Path(sys.argv[1])
from fedsheaf.rundir.lifecycle import follow_run_dir
follow_run_dir(run)
if sys.argv[2] == "stopped":
    (run / "stopped.json").write_text("{}")
if sys.argv[2] == "leaving":
    world.leaving()
os.kill(os.getpid(), signal.SIGTERM)
"""


@pytest.mark.parametrize("how", ["training", "stopped", "leaving"])
def test_sigterm_is_said_unless_the_run_ended_on_purpose(tmp_path, how):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RANK), str(tmp_path), how],
        cwd=REPO,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGTERM  # ended by the signal, as it would have
    failed = tmp_path / "failed.json"
    if how == "training":
        error = json.loads(failed.read_text())["error"]
        assert error.startswith("terminated by SIGTERM")
        assert proc.stderr.strip() == f"fedsheaf: rank 0 {error}"
    else:  # srun --kill-on-bad-exit terminating ranks that leave on purpose
        assert not failed.exists() and proc.stderr == ""
