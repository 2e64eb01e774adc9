"""Host topology for local launches: hardware threads are not Open MPI slots."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fedsheaf.hostinfo import (
    failed_to_start,
    launch_flags,
    physical_cores,
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
