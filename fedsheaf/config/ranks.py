"""How many MPI ranks a config runs on, without importing torch (``fedsheaf sweep``
plans studies with it; the job and ``fedsheaf check`` refuse other counts with it)."""

from __future__ import annotations

from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.graphs import load_graph
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.hostinfo import singleton_hint


def ranks_needed(cfg: ExperimentConfig) -> tuple[int, int]:
    """The fewest and the most ranks ``cfg`` can run with (equal for a graph run)."""
    if cfg.decentralized or cfg.hub_based:
        assert cfg.graph is not None  # ExperimentConfig.check requires it of graph runs
        n = load_graph(cfg.graph).n + (1 if cfg.hub_based else 0)
        return n, n
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
