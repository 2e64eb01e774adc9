"""Host topology for local launches: hardware threads are not Open MPI slots."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedsheaf.util.hostinfo import (
    LOCAL_BTL,
    failed_to_start,
    gpus_of_rank,
    launch_flags,
    lone_task,
    physical_cores,
    singleton_hint,
    threads_per_rank,
    unusable_gpus,
    usable_cpu_ids,
    usable_cpus,
)

ROOT = Path(__file__).resolve().parents[2]


def fake_sysfs(root: Path, layout: dict[int, tuple[int, int]]) -> Path:
    """``<root>/cpu<N>/topology/{physical_package_id,core_id}`` as Linux lays them out."""
    for cpu, (package, core) in layout.items():
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    return root


def test_smt_siblings_count_once(tmp_path):
    # 4 cores x 2 threads: Linux numbers the siblings cpu0-3 and cpu4-7
    sysfs = fake_sysfs(tmp_path, {c: (0, c % 4) for c in range(8)})
    assert physical_cores(list(range(8)), sysfs) == 4
    assert physical_cores([0, 4], sysfs) == 1  # an affinity mask holding one core's threads
    assert physical_cores([0, 1], sysfs) == 2


def test_core_ids_repeat_across_packages(tmp_path):
    sysfs = fake_sysfs(tmp_path, {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)})
    assert physical_cores([0, 1, 2, 3], sysfs) == 4


def test_unreadable_topology_counts_every_cpu(tmp_path):
    sysfs = fake_sysfs(tmp_path, {0: (0, 0), 1: (0, 0)})
    assert physical_cores([0, 1, 2], sysfs) == 3  # cpu2 has no topology files
    assert physical_cores([0, 1], tmp_path / "absent") == 2


def test_this_host_is_consistent():
    assert usable_cpus() == len(usable_cpu_ids()) >= 1
    assert 1 <= physical_cores() <= usable_cpus()


def test_oversubscribe_only_beyond_the_cores(monkeypatch):
    monkeypatch.delenv("FEDSHEAF_THREADS", raising=False)
    flags, env = launch_flags(physical_cores())
    assert flags == [] and "FEDSHEAF_THREADS" not in env
    flags, env = launch_flags(physical_cores() + 1)
    assert flags == ["--oversubscribe"] and env["FEDSHEAF_THREADS"] == "1"
    monkeypatch.setenv("FEDSHEAF_THREADS", "3")
    assert launch_flags(10_000)[1]["FEDSHEAF_THREADS"] == "3"
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    assert ("OMPI_ALLOW_RUN_AS_ROOT" in env) == root


def test_a_local_launch_leaves_libfabric_out_unless_told(monkeypatch, tmp_path):
    """Open MPI's transports on one machine: all but libfabric's (its start costs each
    process about 1 s); an OMPI_MCA_btl of the user's wins, in Python and run/mpirun.sh."""
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert launch_flags(1)[1]["OMPI_MCA_btl"] == LOCAL_BTL == "^ofi"
    monkeypatch.setenv("OMPI_MCA_btl", "self,tcp")
    assert "OMPI_MCA_btl" not in launch_flags(1)[1]
    echo = tmp_path / "mpiexec"  # says which transports it was given
    echo.write_text('#!/bin/sh\nprintf "%s\\n" "${OMPI_MCA_btl-unset}"\n')
    echo.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_btl"}
    for given, want in ((None, "^ofi"), ("self,tcp", "self,tcp"), ("", "")):
        extra = {} if given is None else {"OMPI_MCA_btl": given}
        out = subprocess.run(
            ["bash", str(ROOT / "run" / "mpirun.sh"), "1", "true"],
            env={**env, **extra, "MPIEXEC": str(echo)},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout == want + "\n", given


def test_mpirun_script_flags(tmp_path):
    """run/mpirun.sh asks hostinfo for the cores; an empty flag list is fine (bash 3.2)."""
    echo = tmp_path / "mpiexec"
    echo.write_text('#!/bin/sh\nprintf "%s\\n" "$*"\n')
    echo.chmod(0o755)
    env = {**os.environ, "MPIEXEC": str(echo)}
    env.pop("FEDSHEAF_THREADS", None)

    def launch(n: int) -> str:
        out = subprocess.run(
            ["bash", str(ROOT / "run" / "mpirun.sh"), str(n), "python", "-V"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    assert launch(physical_cores()) == f"-n {physical_cores()} python -V"
    assert launch(physical_cores() + 1) == f"--oversubscribe -n {physical_cores() + 1} python -V"
    bad = subprocess.run(
        ["bash", str(ROOT / "run" / "mpirun.sh"), "x", "true"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "positive integer" in bad.stderr
    for n in ("0", "007"):  # 0 ranks is not a job; a leading 0 is not a count either
        zero = subprocess.run(
            ["bash", str(ROOT / "run" / "mpirun.sh"), n, "true"], env=env, capture_output=True
        )
        assert zero.returncode == 2 and b"positive integer" in zero.stderr


def test_a_start_failure_is_known_text_before_the_ranks_printed():
    logged = (ROOT / "results/bench/logs/small-check/pair.log").read_text()  # the real one
    assert failed_to_start(logged)
    assert failed_to_start("x\nunable to reliably start one or more daemons\n")
    assert failed_to_start(logged, started="fedsheaf: ")  # no rank printed
    assert not failed_to_start("fedsheaf: writing runs/x\n" + logged, started="fedsheaf: ")
    assert not failed_to_start("Traceback (most recent call last):\nImportError: mpi4py\n")
    assert not failed_to_start("")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where CUDA is unusable")
@pytest.mark.parametrize("visible", ["0", "0,1", "GPU-5f3c"])
def test_gpus_given_but_unusable_are_named(visible):
    why = unusable_gpus(visible)
    assert why is not None and f"CUDA_VISIBLE_DEVICES={visible}" in why
    assert "train.device=cpu" in why
    assert ("CPU-only build" in why) == (torch.version.cuda is None)


@pytest.mark.parametrize("visible", ["", "-1", "NoDevFiles", " ", "None", "void"])
def test_no_gpus_given_is_no_complaint(visible):
    assert unusable_gpus(visible) is None


def test_a_run_on_a_job_with_unusable_gpus_stops_with_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs a machine where CUDA is unusable")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "FEDSHEAF_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedsheaf",
            "run",
            "configs/quickstart.yaml",
            "train.epochs=1",
            f"output.dir={tmp_path}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedsheaf: error")]
    assert len(lines) == 1 and "cannot use them" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())
    forced = subprocess.run(  # train.device=cpu: the CPU was asked for
        [*proc.args, "train.device=cpu"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    # (one process holds all four agents, issue 29: the run goes on, on the CPU)
    assert forced.returncode == 0 and "cannot use them" not in forced.stderr, forced.stderr


@pytest.mark.parametrize(
    "masks,mine,threads",
    [
        ([set(range(8))] * 4, 0, 2),  # no binding: four ranks share eight CPUs
        ([{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}], 1, 8),  # srun -c 8
        ([{0}, {1}], 0, 1),  # mpiexec --bind-to core
        ([set(range(4))] * 8, 3, 1),  # more ranks than CPUs: at least one thread
        ([{0, 1, 2, 3}, {2, 3, 4, 5}, {6, 7}], 0, 2),  # partial overlap: shared by two
    ],
)
def test_threads_per_rank_divides_only_among_ranks_that_share_cpus(masks, mine, threads):
    assert threads_per_rank(masks, mine) == threads


@pytest.mark.parametrize(
    "local_rank,local_size,n_gpus,owned",
    [
        (0, 1, 4, [0, 1, 2, 3]),  # one process on a 4-GPU node: all four
        (1, 2, 4, [1, 3]),  # two ranks deal four GPUs out
        (2, 3, 8, [2, 5]),  # uneven: 8 GPUs over 3 ranks (3, 3 and 2)
        (3, 4, 4, [3]),  # one GPU per rank, as before agents shared ranks
        (5, 8, 2, [1]),  # ranks outnumber GPUs: the one it shares (local rank mod GPUs)
        (0, 2, 0, []),  # no GPU
    ],
)
def test_a_nodes_gpus_are_dealt_out_among_its_ranks(local_rank, local_size, n_gpus, owned):
    """train.agent_gpus=spread: the GPUs a rank's agents take turns on, its own first
    (the device choose_device gives it: local rank mod GPUs)."""
    assert gpus_of_rank(local_rank, local_size, n_gpus) == owned
    if owned:
        assert owned[0] == local_rank % n_gpus


def test_srun_singletons_are_refused_and_named_the_pmi_mismatch(tmp_path):
    """srun -n 4 with a --mpi plugin that does not fit mpi4py's MPI gives four jobs of one
    rank each. One rank may hold all of a graph's agents (issue 29), so each would run the
    whole run alone: the job is refused, saying why."""
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    base["FEDSHEAF_THREADS"] = "1"
    argv = [sys.executable, "-m", "fedsheaf", "run", "configs/quickstart.yaml"]
    argv += [f"output.dir={tmp_path}"]
    srun = subprocess.run(
        argv,
        cwd=ROOT,
        env={**base, "SLURM_STEP_NUM_TASKS": "4", "SLURM_MPI_TYPE": "pmi2"},
        capture_output=True,
        text=True,
    )
    assert srun.returncode == 2, srun.stderr
    said = [ln for ln in srun.stderr.splitlines() if ln.startswith("fedsheaf: error")]
    assert len(said) == 1 and said[0].startswith(
        "fedsheaf: error: MPI made this process a job of 1 rank (srun started 4 tasks"
    ), srun.stderr
    assert not any(tmp_path.iterdir())  # nothing run
    assert "srun started 4 tasks, but MPI made each a job of its own" in srun.stderr
    assert "plugin, pmi2, does not fit" in srun.stderr and "Traceback" not in srun.stderr
    assert "try srun --mpi=pmix (SRUN_MPI=" in srun.stderr  # not the plugin that failed


def test_a_server_based_run_under_srun_singletons_gets_the_hint_too(monkeypatch):
    from fedsheaf.config.ranks import check_ranks
    from fedsheaf.config.sections import load_config
    from fedsheaf.util.errors import ConfigError

    cfg = load_config(ROOT / "configs" / "fedrep_fmnist_100c2.yaml")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "101")
    with pytest.raises(ConfigError, match="needs at least 2 ranks.*srun started 101 tasks"):
        check_ranks(cfg, 1)


@pytest.mark.parametrize("tasks,ranks", [("1", 1), ("", 1), ("4", 4), ("x", 1)])
def test_no_singleton_hint_where_the_ranks_did_join(monkeypatch, tasks, ranks):
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", tasks)
    assert singleton_hint(ranks) == ""
    assert lone_task(ranks) is None  # a plain process, or joined ranks: not refused


def test_the_singleton_hint_offers_the_other_plugin_family(monkeypatch):
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    monkeypatch.setenv("SLURM_MPI_TYPE", "pmix_v4")
    hint = singleton_hint(1)
    assert "plugin, pmix_v4, does not fit" in hint and "try srun --mpi=pmi2 (" in hint


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="no /proc here")
def test_process_state_tells_a_stopped_and_an_ended_process():
    """What a rank reads of a peer of its node (runtime/world.py, runtime/watchdog.py): a
    real child process, stopped, continued, ended but not yet reaped, then reaped."""
    import signal

    from fedsheaf.util.hostinfo import process_state

    child = subprocess.Popen(["sleep", "60"])
    try:
        assert process_state(child.pid) == "running"
        os.kill(child.pid, signal.SIGSTOP)
        for _ in range(200):  # (the kernel stops it at once; give a loaded host time)
            if process_state(child.pid) == "stopped":
                break
            time.sleep(0.01)
        assert process_state(child.pid) == "stopped"
        os.kill(child.pid, signal.SIGCONT)
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, still a zombie
        assert process_state(child.pid) == "gone"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) == "gone"
