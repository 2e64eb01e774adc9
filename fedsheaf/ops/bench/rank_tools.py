"""Rank-side helpers shared by the benchmark cases: clocks, idle waits, stand-ins.

These use only objects the runtime hands out (``World``, its communicator); nothing
here imports mpi4py.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedsheaf.algorithms.base import Arrived
from fedsheaf.util import memory
from fedsheaf.util.hostinfo import usable_cpus

if TYPE_CHECKING:
    from fedsheaf.runtime.world import World


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so that wall-clock times are real (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def idle_barrier(comm: Any, poll: float = 0.005) -> None:
    """A barrier that sleeps while it waits, so idle ranks leave the cores to busy ones.

    (``Barrier`` busy-polls in Open MPI; a rank that sits out a phase of a benchmark
    must not steal the CPU from the ranks being timed.)
    """
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


class Clock:
    """Barrier-to-barrier timing of one piece of work on every rank of ``comm``."""

    def __init__(self, comm: Any, device: torch.device) -> None:
        self.comm, self.device = comm, device

    def time(self, work: Any) -> float:
        """Seconds from the moment every rank is ready until the last one has finished."""
        sync(self.device)
        self.comm.Barrier()
        start = time.perf_counter()
        work()
        sync(self.device)
        self.comm.Barrier()
        return time.perf_counter() - start


class Silent:
    """A reporter that drops epoch records (the benchmark keeps its own)."""

    def epoch(self, record: dict[str, Any]) -> None:
        pass


class NoNeighbours:
    """The exchange of an agent trained alone (sequential baseline, 1-rank scaling)."""

    def __init__(self) -> None:
        self.neighbours: list[int] = []

    def exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        return []

    def exchange_each(self, mats: Any, shapes: Any = None, device: Any = None) -> list[Any]:
        return []

    def start_exchange(self, mat: Any, shapes: Any = None, device: Any = None) -> Arrived:
        return Arrived([])

    def start_exchange_each(self, mats: Any, shapes: Any = None, device: Any = None) -> Arrived:
        return Arrived([])

    def take_round_bytes(self) -> dict[int, int]:
        return {}


def mps_pipe() -> str | None:
    """The CUDA MPS control pipe this process would join, if an MPS daemon runs.

    Without MPS, ranks sharing one GPU get it in turns (time slices); with it their
    kernels run concurrently. ``CUDA_MPS_PIPE_DIRECTORY`` or the default
    ``/tmp/nvidia-mps``; None when no control pipe is there.
    """
    folder = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    return str(folder) if (folder / "control").exists() else None


def environment(world: World) -> dict[str, Any]:
    """Where the numbers come from: host, cores, load, threads, device, versions."""
    device = world.device
    info: dict[str, Any] = {
        "host": platform.node(),
        "cores": usable_cpus(),
        "ranks": world.size,
        "ranks_on_node": world.local_size,
        "torch_threads": torch.get_num_threads(),
        "malloc": memory.malloc_library(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["mps"] = mps_pipe()
    return info
