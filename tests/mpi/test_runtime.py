"""The MPI runtime with real ranks: neighbour exchange and failure handling."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n", [1, 2, 4, 5])
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
