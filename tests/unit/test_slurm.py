"""The SLURM batch scripts' logic, with a fake ``srun`` on PATH instead of a cluster."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "slurm"
FAKE_SRUN = """#!/bin/bash
# records its arguments (one per line) and the thread settings it was started with
log=${FAKE_SRUN_LOG:?}
printf '%s\\n' "$@" > "$log"
echo "FEDSHEAF_THREADS=${FEDSHEAF_THREADS:-}" > "$log.env"
echo "PWD=$(pwd)" >> "$log.env"
echo "CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-}" >> "$log.env"
echo "FEDSHEAF_STOPPED_FILE=${FEDSHEAF_STOPPED_FILE:-}" >> "$log.env"
if [[ -n ${FAKE_SRUN_STOP:-} ]]; then  # the run stopped on SIGUSR1, as fedsheaf says so
  echo '{"run_dir": "runs/x", "epoch": 3}' > "$FEDSHEAF_STOPPED_FILE"
fi
exit "${FAKE_SRUN_EXIT:-0}"
"""
FAKE_SCONTROL = """#!/bin/bash
echo "$@" >> "${FAKE_SRUN_LOG:?}.scontrol"
exit "${FAKE_SCONTROL_EXIT:-0}"
"""


#: What every script passes srun before the command (SLURM_CPUS_PER_TASK unset: 1).
SRUN_OPTS = ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpus-per-task=1"]


@pytest.fixture
def fake_srun(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "srun.log"

    def run(script: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        full.update(
            PATH=f"{bin_dir}:{os.environ['PATH']}",
            FAKE_SRUN_LOG=str(log),
            SLURM_SUBMIT_DIR=str(REPO),
        )
        full.update(env)
        log.unlink(missing_ok=True)
        log.with_name("srun.log.scontrol").unlink(missing_ok=True)
        proc = subprocess.run(
            ["bash", str(SLURM / script), *args],
            env=full,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        argv = log.read_text().splitlines() if log.exists() else []
        return proc, argv

    run.log = log  # type: ignore[attr-defined]
    return run


@pytest.mark.parametrize("script", ["study15.sbatch", "sweep_array.sbatch"])
def test_scripts_are_strict_bash(script):
    text = (SLURM / script).read_text()
    assert text.startswith("#!/bin/bash")
    assert "set -euo pipefail" in text
    assert subprocess.run(["bash", "-n", str(SLURM / script)]).returncode == 0


def test_study15_runs_fifteen_ranks_on_its_config(fake_srun):
    proc, argv = fake_srun("study15.sbatch", "seed=2", SLURM_NTASKS="15", SLURM_CPUS_PER_TASK="6")
    assert proc.returncode == 0, proc.stderr
    # a rank dying outside Python ends the step; srun gets the task's cores itself
    assert argv[:4] == ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpus-per-task=6", "-n"]
    assert argv[4] == "15"
    cmd = argv[argv.index("python") :]
    assert cmd[:5] == ["python", "-m", "fedsheaf", "run", "configs/mnist15.yaml"]
    assert cmd[5:] == ["checkpoint.resume=true", "seed=2"]
    env = fake_srun.log.with_name("srun.log.env").read_text()
    assert "FEDSHEAF_THREADS=6" in env and f"PWD={REPO}" in env


def test_study15_options_and_errors(fake_srun, tmp_path):
    proc, argv = fake_srun("study15.sbatch", RESUME="false", CONFIG="configs/quickstart.yaml")
    assert proc.returncode == 0, proc.stderr
    assert argv[-1] == "configs/quickstart.yaml"
    env = fake_srun.log.with_name("srun.log.env").read_text()
    assert "FEDSHEAF_THREADS=1" in env  # no SLURM_CPUS_PER_TASK: one thread
    for wrong in ("16", "0", "x"):
        proc, argv = fake_srun("study15.sbatch", SLURM_NTASKS=wrong)
        assert proc.returncode == 2 and argv == []
        said = "takes 1 to 15 tasks (one rank per agent, or agents sharing ranks), got"
        assert f"{said} SLURM_NTASKS={wrong}" in proc.stderr
    proc, argv = fake_srun("study15.sbatch", CONFIG="configs/missing.yaml")
    assert proc.returncode == 2 and argv == [] and "configs/missing.yaml not found" in proc.stderr
    proc, _ = fake_srun("study15.sbatch", FAKE_SRUN_EXIT="3")
    assert proc.returncode == 3  # a failed run fails the job


def test_study15_places_its_agents_on_the_tasks_it_gets(fake_srun):
    # sbatch --ntasks=3: the 15 agents on 3 ranks, 5 a rank (issue 29)
    for ranks in ("1", "3", "5"):
        proc, argv = fake_srun("study15.sbatch", SLURM_NTASKS=ranks)
        assert proc.returncode == 0, proc.stderr
        assert argv[argv.index("-n") + 1] == ranks
        assert f"study15: 15 agents on {ranks} ranks" in proc.stdout


def _run_list(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "commands.txt"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_sweep_array_runs_the_line_of_its_task(fake_srun, tmp_path):
    lines = [
        shlex.join(
            [
                "mpiexec",
                "-n",
                "15",
                "fedsheaf",
                "run",
                "configs/mnist15.yaml",
                f"output.name=run{k}",
                "sheaf.lam=0.1",
                "output.dir=my runs",
            ]
        )
        for k in range(1, 4)
    ]
    lines.append(shlex.join(["fedsheaf", "run", "configs/pair.yaml", "output.name=run4"]))
    lines.append(shlex.join(["srun", "-n", "2", "fedsheaf", "run", "configs/pair.yaml"]))
    runs = _run_list(tmp_path, lines)
    for task in (1, 2, 3):
        proc, argv = fake_srun(
            "sweep_array.sbatch",
            str(runs),
            "seed=7",
            SLURM_ARRAY_TASK_ID=str(task),
            SLURM_CPUS_PER_TASK="3",
            SLURM_NTASKS="15",  # the -n of the line (sbatch --ntasks=15)
        )
        assert proc.returncode == 0, proc.stderr
        assert argv[:3] == ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpus-per-task=3"]
        assert argv[3:] == [
            "-n",
            "15",
            "fedsheaf",
            "run",
            "configs/mnist15.yaml",
            f"output.name=run{task}",
            "sheaf.lam=0.1",
            "output.dir=my runs",
            "seed=7",
        ]
    assert "FEDSHEAF_THREADS=3" in fake_srun.log.with_name("srun.log.env").read_text()
    _, argv = fake_srun("sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID="4")
    assert argv == [*SRUN_OPTS, "fedsheaf", "run", "configs/pair.yaml", "output.name=run4"]
    _, argv = fake_srun(
        "sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID="5", SRUN_MPI="pmi2", SLURM_NTASKS="2"
    )
    assert argv == [
        "--mpi=pmi2",
        *SRUN_OPTS[1:],
        *["-n", "2", "fedsheaf", "run", "configs/pair.yaml"],
    ]


@pytest.mark.parametrize(
    "task,args,message",
    [
        ("1", [], "no run list given"),
        ("1", ["missing.txt"], "run list missing.txt not found"),
        ("", ["LIST"], "not an array index"),
        ("9", ["LIST"], "has no command on line 9 (it has 2 lines; submit with --array=1-2)"),
        ("0", ["LIST"], "has no command on line 0"),
        ("2", ["LIST"], "has no command on line 2"),
    ],
)
def test_sweep_array_fails_clearly(fake_srun, tmp_path, task, args, message):
    runs = _run_list(tmp_path, ["fedsheaf run configs/pair.yaml", ""])
    args = [str(runs) if a == "LIST" else a for a in args]
    env = {"SLURM_ARRAY_TASK_ID": task} if task else {}
    proc, argv = fake_srun("sweep_array.sbatch", *args, **env)
    assert proc.returncode == 2 and argv == []
    assert message in proc.stderr, proc.stderr


def test_fedrep_script_passes_config_and_algorithm(fake_srun):
    assert "set -euo pipefail" in (SLURM / "fedrep_100clients.sbatch").read_text()
    proc, argv = fake_srun(
        "fedrep_100clients.sbatch",
        "federated.rounds=5",
        CONFIG="configs/fedrep_fmnist_100c2.yaml",
        ALGORITHM="fedavg_ft",
        SLURM_NTASKS="101",
    )
    assert proc.returncode == 0, proc.stderr
    assert argv[:4] == [*SRUN_OPTS, "--cpu-bind=cores"]
    cmd = argv[argv.index("-m") :]
    assert cmd[:4] == ["-m", "fedsheaf", "run", "configs/fedrep_fmnist_100c2.yaml"]
    assert "algorithm=fedavg_ft" in cmd and cmd[-1] == "federated.rounds=5"
    assert "checkpoint.resume=true" in cmd  # a requeued job continues
    _, argv = fake_srun("fedrep_100clients.sbatch", RESUME="false", SLURM_NTASKS="101")
    assert not any(a.startswith("checkpoint.resume") for a in argv)


def test_study15_with_mps_wraps_srun_in_a_daemon(fake_srun, tmp_path):
    from tests.unit.test_mps_wrapper import install_fake_mps

    install_fake_mps(tmp_path / "bin")
    proc, argv = fake_srun("study15.sbatch", MPS="true", FAKE_MPS_LOG=str(tmp_path / "mps.log"))
    assert proc.returncode == 0, proc.stderr
    assert "mps=true" in proc.stdout and argv[:5] == [*SRUN_OPTS, "-n", "15"]
    env = fake_srun.log.with_name("srun.log.env").read_text()
    pipe = next(ln.split("=", 1)[1] for ln in env.splitlines() if ln.startswith("CUDA_MPS_PIPE"))
    assert pipe.endswith("/pipe")
    calls = (tmp_path / "mps.log").read_text().splitlines()
    assert calls[0].startswith(f"start pipe={pipe}") and calls[1] == f"cmd quit pipe={pipe}"
    proc, _ = fake_srun("study15.sbatch")  # default: no daemon
    assert "mps=false" in proc.stdout
    assert "CUDA_MPS_PIPE_DIRECTORY=\n" in fake_srun.log.with_name("srun.log.env").read_text()


def test_fedrep_script_takes_seed_and_algorithm_from_its_environment(fake_srun):
    proc, argv = fake_srun("fedrep_100clients.sbatch", SEED="3", SLURM_NTASKS="101")
    assert proc.returncode == 0, proc.stderr
    assert "seed=3" in argv and "output.name=fedrep_cifar10_100c2-fedrep-seed3" in argv
    for arg in ("seed=3", "algorithm=fedavg", "output.name=x"):  # would misname the run
        proc, argv = fake_srun("fedrep_100clients.sbatch", arg, SLURM_NTASKS="101")
        assert proc.returncode == 2 and argv == [] and f"'{arg}' would contradict" in proc.stderr
    proc, argv = fake_srun("fedrep_100clients.sbatch", CONFIG="configs/missing.yaml")
    assert proc.returncode == 2 and "configs/missing.yaml not found" in proc.stderr


@pytest.mark.parametrize(
    "script", ["study15.sbatch", "sweep_array.sbatch", "fedrep_100clients.sbatch"]
)
def test_scripts_keep_their_log_when_requeued_and_need_fedsheaf(fake_srun, tmp_path, script):
    text = (SLURM / script).read_text()
    assert "#SBATCH --requeue\n" in text and "#SBATCH --open-mode=append\n" in text
    elsewhere = tmp_path / "elsewhere"  # a checkout without .venv, and a bare python:
    (elsewhere / "fedsheaf").mkdir(parents=True)  # the checkout's package must not count
    (elsewhere / "fedsheaf" / "__init__.py").write_text("")
    shim = tmp_path / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # -S: no site-packages
    shim.chmod(0o755)
    runs = _run_list(tmp_path, ["fedsheaf run configs/pair.yaml"])
    args = [str(runs)] if script == "sweep_array.sbatch" else []
    (elsewhere / "configs").mkdir()
    for config in ("mnist15.yaml", "fedrep_cifar10_100c2.yaml"):
        (elsewhere / "configs" / config).write_text("name: x\n")
    proc, argv = fake_srun(script, *args, SLURM_SUBMIT_DIR=str(elsewhere), SLURM_ARRAY_TASK_ID="1")
    assert proc.returncode == 2 and argv == [], proc.stderr
    assert "no python here imports fedsheaf with torch and mpi4py (tried: " in proc.stderr


def test_study15_with_mps_needs_one_node(fake_srun):
    proc, argv = fake_srun("study15.sbatch", MPS="true", SLURM_JOB_NUM_NODES="2")
    assert proc.returncode == 2 and argv == [] and "submit with --nodes=1" in proc.stderr


@pytest.mark.parametrize(
    "script", ["study15.sbatch", "sweep_array.sbatch", "fedrep_100clients.sbatch"]
)
def test_scripts_accept_torch_and_mpi4py_from_pythonpath(fake_srun, tmp_path, script):
    """Cluster modules (EasyBuild, Spack) provide torch and mpi4py through PYTHONPATH:
    a bare interpreter with them there passes the scripts' check."""
    import sysconfig

    elsewhere = tmp_path / "elsewhere"  # a checkout without .venv
    (elsewhere / "configs").mkdir(parents=True)
    for config in ("mnist15.yaml", "fedrep_cifar10_100c2.yaml"):
        (elsewhere / "configs" / config).write_text("name: x\n")
    shim = tmp_path / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')  # -S: no site-packages
    shim.chmod(0o755)
    modules = os.pathsep.join([sysconfig.get_paths()["purelib"], str(REPO)])
    runs = _run_list(tmp_path, ["python -m fedsheaf run configs/pair.yaml"])
    args = [str(runs)] if script == "sweep_array.sbatch" else []
    proc, argv = fake_srun(
        script,
        *args,
        SLURM_SUBMIT_DIR=str(elsewhere),
        SLURM_ARRAY_TASK_ID="1",
        SLURM_NTASKS={"study15.sbatch": "15"}.get(script, "101"),
        PYTHONPATH=modules,
        PATH=f"{shim.parent}:/usr/bin:/bin",  # no fedsheaf command: `python -m` needs none
    )
    assert proc.returncode == 0, proc.stderr
    assert "python" in argv
    if script == "sweep_array.sbatch":  # ... while a line that runs `fedsheaf` does
        runs = _run_list(tmp_path, ["fedsheaf run configs/pair.yaml"])
        proc, argv = fake_srun(
            script,
            str(runs),
            SLURM_SUBMIT_DIR=str(elsewhere),
            SLURM_ARRAY_TASK_ID="1",
            PYTHONPATH=modules,
            PATH=f"{shim.parent}:/usr/bin:/bin",
        )
        assert proc.returncode == 2 and argv == []
        assert "the line runs 'fedsheaf', which is not on PATH" in proc.stderr


@pytest.mark.parametrize(
    "script", ["study15.sbatch", "sweep_array.sbatch", "fedrep_100clients.sbatch"]
)
def test_an_environment_that_works_is_kept_and_else_the_checkouts_venv(fake_srun, tmp_path, script):
    """The python active at sbatch (a venv, conda, modules) is used when it imports
    fedsheaf; else the submit directory's .venv, and if neither works, one message."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "configs").mkdir(parents=True)
    for config in ("mnist15.yaml", "fedrep_cifar10_100c2.yaml"):
        (elsewhere / "configs" / config).write_text("name: x\n")
    shim = tmp_path / "bin" / "python"
    marker = tmp_path / "activated"
    activate = elsewhere / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    runs = _run_list(tmp_path, ["python -m fedsheaf run configs/pair.yaml"])
    args = [str(runs)] if script == "sweep_array.sbatch" else []
    env = dict(
        SLURM_SUBMIT_DIR=str(elsewhere),
        SLURM_ARRAY_TASK_ID="1",
        SLURM_NTASKS={"study15.sbatch": "15"}.get(script, "101"),
        CONDA_PREFIX="/opt/conda",  # conda's base, say: it does not decide anything
    )
    works = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    bare = f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n'  # no site-packages: no torch
    good_venv = tmp_path / "venv-bin"
    good_venv.mkdir()
    (good_venv / "python").write_text(works)
    (good_venv / "python").chmod(0o755)
    for active, venv, used, status in (
        (works, "", False, 0),  # the active python works: .venv is left alone
        (bare, f'export PATH="{good_venv}:$PATH"', True, 0),  # it does not: .venv does
        (bare, "", True, 2),  # neither does
    ):
        shim.write_text(active)
        shim.chmod(0o755)
        activate.write_text(f"touch '{marker}'\n{venv}\n")
        marker.unlink(missing_ok=True)
        proc, _ = fake_srun(script, *args, **env)
        assert proc.returncode == status, proc.stderr
        assert marker.exists() == used
        if status == 0:  # the job log names its interpreter
            assert f"python {good_venv if used else shim.parent}/python" in proc.stdout
        else:
            assert f"(tried: {shim}, then {elsewhere}/.venv)" in proc.stderr


def _scontrol(fake_srun) -> list[str]:
    calls = fake_srun.log.with_name("srun.log.scontrol")
    return calls.read_text().splitlines() if calls.exists() else []


def _submit_dir(tmp_path: Path) -> dict[str, str]:
    """A submit directory of its own (the scripts write their stop note there) with the
    default configs, and `python` the interpreter of these tests: the job's settings."""
    submit = tmp_path / "submit"
    (submit / "configs").mkdir(parents=True)
    for config in ("mnist15.yaml", "fedrep_cifar10_100c2.yaml"):
        (submit / "configs" / config).write_text("name: x\n")
    shim = tmp_path / "bin" / "python"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    return {"SLURM_SUBMIT_DIR": str(submit), "VIRTUAL_ENV": "", "CONDA_PREFIX": ""}


@pytest.mark.parametrize(
    "script", ["study15.sbatch", "sweep_array.sbatch", "fedrep_100clients.sbatch"]
)
def test_a_run_stopped_before_the_time_limit_requeues_its_job(fake_srun, tmp_path, script):
    text = (SLURM / script).read_text()
    assert "\n#SBATCH --signal=USR1@300\n" in text  # SIGUSR1 to the ranks, 5 min ahead
    runs = _run_list(
        tmp_path,
        ["python -m fedsheaf run c.yaml checkpoint.resume=true", "python -m fedsheaf run c.yaml"],
    )
    args = [str(runs)] if script == "sweep_array.sbatch" else []
    env = dict(SLURM_ARRAY_TASK_ID="1", SLURM_NTASKS="15", SLURM_JOB_ID="4242")
    env.update(_submit_dir(tmp_path))
    if script == "fedrep_100clients.sbatch":
        env["SLURM_NTASKS"] = "101"
    note = tmp_path / "submit" / ".fedsheaf-stopped.4242"  # the submit directory: shared
    proc, _ = fake_srun(script, *args, **env, FAKE_SRUN_STOP="1", FAKE_SRUN_EXIT="137")
    assert proc.returncode == 0, proc.stderr  # srun's status does not count: the note does
    assert _scontrol(fake_srun) == ["requeue 4242"]
    assert "stopped before the time limit with a checkpoint; job requeued" in proc.stdout
    srun_env = fake_srun.log.with_name("srun.log.env").read_text()
    assert f"FEDSHEAF_STOPPED_FILE={note}" in srun_env and not note.exists()

    proc, _ = fake_srun(script, *args, **env, FAKE_SRUN_STOP="1", FAKE_SCONTROL_EXIT="1")
    assert proc.returncode == 75 and "not requeued" in proc.stderr  # scontrol refused
    proc, _ = fake_srun(script, *args, **env, FAKE_SRUN_EXIT="3")  # a failure, not a stop
    assert proc.returncode == 3 and _scontrol(fake_srun) == []
    proc, _ = fake_srun(script, *args, **env)
    assert proc.returncode == 0 and _scontrol(fake_srun) == []


@pytest.mark.parametrize(
    "script,env",
    [
        ("study15.sbatch", {"RESUME": "false", "SLURM_NTASKS": "15"}),
        ("fedrep_100clients.sbatch", {"RESUME": "false", "SLURM_NTASKS": "101"}),
        ("sweep_array.sbatch", {"SLURM_ARRAY_TASK_ID": "2"}),  # a line without resume
    ],
)
def test_a_stopped_run_that_would_not_resume_is_not_requeued(fake_srun, tmp_path, script, env):
    runs = _run_list(
        tmp_path,
        ["python -m fedsheaf run c.yaml checkpoint.resume=true", "python -m fedsheaf run c.yaml"],
    )
    args = [str(runs)] if script == "sweep_array.sbatch" else []
    env = {**env, **_submit_dir(tmp_path)}
    proc, _ = fake_srun(script, *args, **env, SLURM_JOB_ID="4243", FAKE_SRUN_STOP="1")
    assert proc.returncode == 75 and _scontrol(fake_srun) == []
    assert "not requeued" in proc.stderr
    assert not (tmp_path / "submit" / ".fedsheaf-stopped.4243").exists()


def test_sweep_array_drops_a_launcher_given_by_its_path(fake_srun, tmp_path):
    line = ["/opt/openmpi/bin/mpiexec", "-n", "2", "python", "-m", "fedsheaf", "run", "c.yaml"]
    runs = _run_list(tmp_path, [shlex.join(line)])
    proc, argv = fake_srun(
        "sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID="1", SLURM_NTASKS="2"
    )
    assert proc.returncode == 0, proc.stderr
    assert argv == [*SRUN_OPTS, *line[1:]]  # srun starts the ranks, not one mpiexec each


@pytest.mark.parametrize(
    "line,requeued",
    [
        ("python -m fedsheaf run --resume runs/x", True),
        ("python -m fedsheaf run --resume=runs/x", True),
        ("python -m fedsheaf run c.yaml output.name=--resumed", False),
    ],
)
def test_sweep_array_lines_that_resume_by_run_directory_are_requeued(
    fake_srun, tmp_path, line, requeued
):
    runs = _run_list(tmp_path, [line])
    env = {**_submit_dir(tmp_path), "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_ID": "77"}
    proc, _ = fake_srun("sweep_array.sbatch", str(runs), **env, FAKE_SRUN_STOP="1")
    assert proc.returncode == (0 if requeued else 75), proc.stderr
    assert _scontrol(fake_srun) == (["requeue 77"] if requeued else [])
    if not requeued:
        assert "add checkpoint.resume=true to the line" in proc.stderr


def test_sweep_array_takes_its_task_count_from_the_submission(fake_srun, tmp_path):
    """One array per task count: a line runs only in a job of as many tasks as its -n."""
    text = (SLURM / "sweep_array.sbatch").read_text()
    assert "\n#SBATCH --ntasks" not in text  # sbatch --ntasks=T gives it
    assert "\n#SBATCH --mem-per-cpu=" in text and "measured" in text
    lines = [
        "mpiexec -n 15 fedsheaf run configs/mnist15.yaml checkpoint.resume=true",
        "srun --ntasks=2 python -m fedsheaf run configs/pair.yaml",
        "mpirun -np 3 python -m fedsheaf run configs/pair.yaml algorithm=fedproto",
    ]
    runs = _run_list(tmp_path, lines)
    for task, wrong, right in (("1", "2", "15"), ("2", "15", "2"), ("3", "2", "3")):
        proc, argv = fake_srun(
            "sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID=task, SLURM_NTASKS=wrong
        )
        assert proc.returncode == 2 and argv == [], proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert f"line {task} of {runs} runs {right} ranks but the job has {wrong} tasks" in (
            proc.stderr
        )
        assert f"submit it with sbatch --ntasks={right}" in proc.stderr
        proc, argv = fake_srun(
            "sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID=task, SLURM_NTASKS=right
        )
        assert proc.returncode == 0 and argv[: len(SRUN_OPTS)] == SRUN_OPTS, proc.stderr
    proc, argv = fake_srun("sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID="1")
    assert proc.returncode == 2 and argv == []
    assert "runs 15 ranks but the job was submitted without --ntasks" in proc.stderr
    # a line without a launcher runs on the job's tasks (the run checks their count)
    runs = _run_list(tmp_path, ["fedsheaf run configs/pair.yaml"])
    proc, argv = fake_srun("sweep_array.sbatch", str(runs), SLURM_ARRAY_TASK_ID="1")
    assert proc.returncode == 0 and argv == [*SRUN_OPTS, "fedsheaf", "run", "configs/pair.yaml"]


@pytest.mark.parametrize(
    "script", ["study15.sbatch", "sweep_array.sbatch", "fedrep_100clients.sbatch"]
)
def test_scripts_say_where_their_memory_request_comes_from(script):
    text = (SLURM / script).read_text()
    mem = next(ln for ln in text.splitlines() if ln.startswith("#SBATCH --mem-per-cpu="))
    assert mem.endswith("G")
    assert "results/bench/README.md" in text and "per rank" in text
