"""fedsheaf.runtime.peers in real processes (no MPI): of two "ranks" of this node, the one
that marks its end before it exits is not reported, the one SIGKILLed is, at once; with
pidfds, and by looking at /proc where there are none (a kernel before 5.3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

#: A rank of the node: maps the marks, then, once told (a line on stdin), marks its end
#: and exits ("leaves") or waits to be killed ("vanishes").
RANK = """
import os, sys, time
from fedsheaf.runtime import peers
path, rank, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
peers.note_peers(rank, {}, peers.attach_marks(path, 3), {0: 0, 1: 1, 2: 2})
print("ready", flush=True)
sys.stdin.readline()
if how == "leaves":
    peers.mark_ending(rank)
    os._exit(0)
time.sleep(600)
"""

#: Rank 0: makes the marks, starts ranks 1 (leaves) and 2 (vanishes), watches them.
WATCHER = """
import os, signal, subprocess, sys, threading, time
from fedsheaf.runtime import peers
if sys.argv[1] == "look":
    del os.pidfd_open
path = peers.create_marks(3)
marks = peers.attach_marks(path, 3)
ranks = {
    r: subprocess.Popen([sys.executable, "-c", sys.argv[2], path, str(r), how],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for r, how in ((1, "leaves"), (2, "vanishes"))
}
for p in ranks.values():
    assert p.stdout.readline() == "ready\\n"
peers.forget_marks(path)
assert not os.path.exists(path)
peers.note_peers(0, {r: p.pid for r, p in ranks.items()}, marks, {0: 0, 1: 1, 2: 2})
said, done = [], threading.Event()
def vanished(gone):
    said.append((gone, time.monotonic()))
    done.set()
assert peers.watch(vanished)
ranks[1].stdin.write("go\\n"); ranks[1].stdin.flush()
ranks[1].wait()
time.sleep(0.5)  # (the watcher has seen rank 1 end on purpose)
killed = time.monotonic()
os.kill(ranks[2].pid, signal.SIGKILL)
done.wait(10)
ranks[2].wait()
time.sleep(0.3)
print([gone for gone, _ in said], said[0][1] - killed < 2 if said else None)
"""


@pytest.mark.parametrize("how", ["pidfd", "look"])
def test_a_rank_that_vanishes_is_reported_and_one_that_marked_its_end_is_not(how):
    if how == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfds here")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WATCHER), how, textwrap.dedent(RANK)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[2]] True", proc.stdout + proc.stderr
