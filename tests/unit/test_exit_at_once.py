"""A rank's quick exit (fedsheaf.runtime.world.exit_at_once), in real processes (MPI
singletons): the atexit functions run, buffered output gets out, the exit status is
kept; the interpreter's teardown (here: a finalizer that runs when module globals are
cleared) is skipped, unless a non-daemon thread still runs, which is waited for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, mpi_env

RANK = """
import atexit, sys, threading, time
from fedsheaf.runtime import world

class Teardown:
    def __del__(self):
        sys.stderr.write("torn down\\n")

kept = Teardown()  # collected only by the interpreter's teardown
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
sys.stdout.write("no newline, still buffered")
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), sys.stderr.write("thread done\\n"))).start()
world.exit_at_once(3)
"""


@pytest.mark.parametrize("thread", [False, True])
def test_a_rank_leaves_with_its_output_and_status_but_without_teardown(thread):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RANK), "thread" if thread else "alone"],
        cwd=REPO,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3 and proc.stdout == "no newline, still buffered", proc
    said = proc.stderr.splitlines()
    assert "atexit ran" in said, proc.stderr
    if thread:  # the usual exit, which waits for the thread (and tears down)
        assert "thread done" in said and "torn down" in said, proc.stderr
    else:
        assert "torn down" not in said, proc.stderr
