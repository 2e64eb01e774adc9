"""How many MPI ranks a config runs on, without importing torch (``fedsheaf sweep``
plans studies with it; the job and ``fedsheaf check`` refuse other counts with it), and
what a batch job of it asks a scheduler for: tasks, GPUs and memory per task."""

from __future__ import annotations

import math

from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.graphs import load_graph
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import singleton_hint
from fedsheaf.util.units import count, human_bytes


def ranks_needed(cfg: ExperimentConfig) -> tuple[int, int]:
    """The fewest and the most ranks ``cfg`` can run with: a decentralized run 1 to N
    (agents share ranks below N), a hub run N + 1, a server-based run 2 to clients + 1."""
    if cfg.decentralized or cfg.hub_based:
        assert cfg.graph is not None  # ExperimentConfig.check requires it of graph runs
        n = load_graph(cfg.graph).n
        return (n + 1, n + 1) if cfg.hub_based else (1, n)
    return 2, cfg.federated.clients + 1


def rank_range(needed: tuple[int, int]) -> str:
    """``(4, 4)`` → ``"4"``, ``(2, 101)`` → ``"2 to 101"``."""
    lo, hi = needed
    return str(lo) if lo == hi else f"{lo} to {hi}"


def check_ranks(cfg: ExperimentConfig, n_ranks: int) -> None:
    """Rank count against clients: one server plus 1..``federated.clients`` workers."""
    fc = cfg.federated
    if n_ranks < 2:
        raise ConfigError(
            f"server-based algorithm {cfg.algorithm} needs at least 2 ranks (1 server + "
            f"1 worker), got {n_ranks}; launch with mpiexec -n 2 or more" + singleton_hint(n_ranks)
        )
    workers = n_ranks - 1
    if workers > fc.clients:
        raise ConfigError(
            f"{workers} worker ranks but federated.clients={fc.clients}: every worker rank "
            f"needs a client; launch with at most {fc.clients + 1} ranks"
        )


#: Peak resident set of a rank, measured on CPU (``results/bench/README.md``, "Memory"):
#: the smallest and largest of the benchmark launches (digits to FashionMNIST, 2 to 15
#: ranks), and the part of it that is torch's shared library files.
MEASURED_RANK_PEAK_GB = (1.0, 1.6)
MEASURED_LIBRARY_GB = 0.6
#: What a task asks for: the largest measured peak with some room (the ``slurm/``
#: scripts' ``--mem-per-cpu`` times their ``--cpus-per-task`` give at least this).
MEMORY_PER_TASK_GB = 2
#: Room a task asks above a rank's estimated peak (:func:`memory_request_gb`).
ESTIMATE_ROOM = 0.5


def memory_request_gb(estimate: int) -> int:
    """Whole GB a task asks for, given the estimated peak of a rank in bytes: the
    estimate plus :data:`ESTIMATE_ROOM` (the measured peaks exceed it: allocator caches,
    where a rank peaks in training or evaluation; the CUDA context on a GPU), rounded up."""
    return max(1, math.ceil(estimate * (1 + ESTIMATE_ROOM) / 1e9))


def gpus_per_task(device: str, given: int | None = None) -> int:
    """The GPUs each task of a run with ``train.device`` = ``device`` asks for: none for
    ``cpu``; else ``given`` (``--gpus-per-task``), by default 1 for ``cuda`` and none
    for ``auto`` (which trains on the CPU where no GPU is visible)."""
    if device == "cpu":
        return 0
    if given is not None:
        return given
    return 1 if device == "cuda" else 0


def rank_roles(cfg: ExperimentConfig, n_ranks: int) -> str:
    """What the ``n_ranks`` ranks of ``cfg``'s job are, in words: ``1 per agent``, or
    for a decentralized run on fewer ranks than agents ``5 agents each`` (``3 to 4
    agents each``: the sizes :func:`fedsheaf.graphs.place_agents` gives)."""
    if cfg.decentralized:
        assert cfg.graph is not None  # ExperimentConfig.check requires it of graph runs
        n = load_graph(cfg.graph).n
        if n_ranks >= n:
            return "1 per agent"
        lo, hi = n // n_ranks, -(-n // n_ranks)
        return f"{lo if lo == hi else f'{lo} to {hi}'} agents each, {n} in all"
    if cfg.hub_based:
        return "1 per agent + 1 server"
    return f"1 server + {count(n_ranks - 1, 'worker')}"


def measured_memory() -> str:
    """The measured peak memory of a rank, in words (what the request rests on)."""
    lo, hi = MEASURED_RANK_PEAK_GB
    return (
        f"a rank peaks at {lo:.1f}-{hi:.1f} GB on CPU, {MEASURED_LIBRARY_GB:.1f} GB of it "
        "shared library files; results/bench/README.md"
    )


def job_request(cfg: ExperimentConfig, n_ranks: int, estimate: int | None = None) -> str:
    """What a batch job of ``n_ranks`` ranks running ``cfg`` asks for: its tasks (and
    what they are), GPUs and memory per task (``estimate``: the estimated peak of its
    largest rank in bytes, :mod:`fedsheaf.rundir.footprint`; beside it, or without one,
    the measured peak of a rank, :func:`measured_memory`)."""
    device = cfg.train.device
    gpus = gpus_per_task(device)
    if gpus:
        gpu = f"{count(gpus, 'GPU')} per task (train.device={device})"
    elif device == "auto":
        gpu = "no GPU (train.device=auto: submit with --gpus-per-task=1 to train on GPUs)"
    else:
        gpu = f"no GPU (train.device={device})"
    if estimate is None:
        memory = f"~{MEMORY_PER_TASK_GB} GB memory per task (measured: {measured_memory()})"
    else:
        memory = (
            f"~{memory_request_gb(estimate)} GB memory per task (the estimated peak "
            f"{human_bytes(estimate)} + {ESTIMATE_ROOM:.0%}, rounded up; measured: "
            f"{measured_memory()})"
        )
    return f"{count(n_ranks, 'task')} ({rank_roles(cfg, n_ranks)}), {gpu}, {memory}"
