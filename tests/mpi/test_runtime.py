"""The MPI runtime with real ranks: neighbour exchange and failure handling; threads."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n", [1, 2, 4])
def test_exchange_variable_sizes_and_isolated_ranks(mpirun, n):
    proc = mpirun(n, ["tests/mpi/programs/exchange.py"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"exchange ok on {n} ranks" in proc.stdout


@pytest.mark.parametrize("n", [1, 2, 4])
def test_star_worker_group_opens_and_closes(mpirun, n):
    proc = mpirun(n, ["tests/mpi/programs/star_workers.py"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"star workers ok on {n} ranks" in proc.stdout


@pytest.mark.parametrize(
    "kind,code,text",
    [
        ("bug", 1, "rank 1 failed with RuntimeError"),
        ("user", 2, "error on rank 1: injected user error"),
    ],
)
def test_exception_on_one_rank_aborts_the_job(mpirun, kind, code, text):
    # a hang would run into the timeout; the abort carries the failing rank's exit code
    proc = mpirun(3, ["tests/mpi/programs/fail_one_rank.py", kind], timeout=60)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count(text) == 1, proc.stderr


def test_every_rank_takes_the_smallest_thread_count_of_the_job():
    """Ranks that would take different thread counts (here: FEDSHEAF_THREADS differing per
    rank, as different CPU shares would) all take the smallest, so that a client trained
    on any worker rounds the same way (a bad value: tests/mpi/test_hardening.py)."""
    from tests.conftest import MPIEXEC, REPO, mpi_env

    cmd = [str(MPIEXEC), "--oversubscribe"]
    for i, value in enumerate(("3", "2", "4")):  # one app context per rank (MPMD)
        cmd += [":"] * (i > 0) + ["-n", "1", "env", f"FEDSHEAF_THREADS={value}"]
        cmd += [sys.executable, "tests/mpi/programs/threads.py"]
    proc = subprocess.run(cmd, cwd=REPO, env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("rank "))
    assert lines == [f"rank {r}: 2 torch threads, world says 2" for r in range(3)], proc.stdout
