"""run/with_mps.sh with a fake ``nvidia-cuda-mps-control`` on PATH (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "run" / "with_mps.sh"
FAKE_MPS_CONTROL = """#!/bin/bash
# records how it was called: "start" for -d (and makes the control pipe), else stdin
log=${FAKE_MPS_LOG:?}
if [[ ${1:-} == -d ]]; then
  echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$log"
  [[ ${FAKE_MPS_START_EXIT:-0} == 0 ]] && touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  exit "${FAKE_MPS_START_EXIT:-0}"
fi
echo "cmd $(cat) pipe=$CUDA_MPS_PIPE_DIRECTORY" >> "$log"
"""


def install_fake_mps(bin_dir: Path) -> None:
    """Put the fake control program into ``bin_dir`` (tests/unit/test_slurm.py uses it)."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-cuda-mps-control").write_text(FAKE_MPS_CONTROL)
    (bin_dir / "nvidia-cuda-mps-control").chmod(0o755)


def wrapped(
    tmp_path: Path, *cmd: str, fake: bool = True, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    if fake:
        install_fake_mps(bin_dir)
    log = tmp_path / "mps.log"
    full = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS")}
    path = os.environ["PATH"] if not fake else f"{bin_dir}:{os.environ['PATH']}"
    full.update(PATH=path, TMPDIR=str(tmp_path), FAKE_MPS_LOG=str(log), **env)
    proc = subprocess.run(
        ["bash", str(WRAPPER), *cmd], env=full, capture_output=True, text=True, timeout=60
    )
    return proc, log.read_text().splitlines() if log.exists() else []


def test_the_command_runs_under_a_private_daemon_that_is_stopped_afterwards(tmp_path):
    proc, calls = wrapped(tmp_path, "bash", "-c", 'echo "in $CUDA_MPS_PIPE_DIRECTORY"; exit 3')
    assert proc.returncode == 3  # the command's status, kept
    pipe = proc.stdout.strip().removeprefix("in ")
    assert pipe.startswith(str(tmp_path / "fedsheaf-mps.")) and pipe.endswith("/pipe")
    assert calls == [
        f"start pipe={pipe} log={pipe.removesuffix('/pipe')}/log",
        f"cmd quit pipe={pipe}",
    ]
    assert "MPS daemon started" in proc.stderr
    assert not Path(pipe).parent.exists()  # the private folders are removed


def test_without_the_control_program_the_command_runs_as_it_is(tmp_path):
    proc, calls = wrapped(tmp_path, "bash", "-c", "echo ran; exit 0", fake=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran" and calls == []
    assert "not found; running without MPS" in proc.stderr


def test_a_daemon_that_does_not_start_stops_before_the_command(tmp_path):
    proc, calls = wrapped(tmp_path, "bash", "-c", "echo ran", FAKE_MPS_START_EXIT="1")
    assert proc.returncode == 1 and "ran" not in proc.stdout
    assert "did not start" in proc.stderr
    assert calls[0].startswith("start") and calls[1].startswith("cmd quit")


def test_a_running_daemon_is_joined_not_replaced(tmp_path):
    running = tmp_path / "running"
    running.mkdir()
    (running / "control").touch()
    proc, calls = wrapped(
        tmp_path,
        "bash",
        "-c",
        "echo $CUDA_MPS_PIPE_DIRECTORY",
        CUDA_MPS_PIPE_DIRECTORY=str(running),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == str(running) and calls == []
    assert "joining the MPS daemon" in proc.stderr


def test_usage(tmp_path):
    proc, _ = wrapped(tmp_path)
    assert proc.returncode == 2 and "usage: run/with_mps.sh" in proc.stderr
