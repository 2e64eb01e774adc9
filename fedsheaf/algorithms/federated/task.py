"""What the server-based round loop runs on: data, model, local solver, evaluation.

The round loop (``fedsheaf.launch.server``) is the same for every
server-based algorithm; what it trains and how it scores differs by *task*.
:class:`Task` is the default, SPEC §4's classification setting (FedRep shards,
the FedRep CNN, :class:`~.trainer.ClientRunner`, local test accuracy). An
algorithm with another setting (head-only FedAvg: regression, a UFM objective,
Gram tracking) returns a subclass from ``make_task`` and overrides only what
differs. Nothing here touches MPI; the two optional hooks
(:meth:`Task.setup_rows` … :meth:`Task.receive_setup`, :meth:`Task.server_round`)
are called by the runtime around its own collectives; a task whose server keeps
state across rounds saves it through :meth:`Task.server_state`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedsheaf.algorithms.federated.schedule import Algorithm
from fedsheaf.algorithms.federated.setup import (
    ClientData,
    build_model,
    check_setup,
    data_splits,
    load_clients,
)
from fedsheaf.algorithms.federated.summary import result_table, round_record, summarize
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.sources import Samples, black_level, data_digest
from fedsheaf.util.units import count


class Task:
    """Classification on FedRep shards (SPEC §4); the base of other tasks.

    Parameters
    ----------
    cfg:
        The run's config.
    algorithm:
        The algorithm (what is shared, the local schedule).
    """

    #: Values per client in an evaluation row, after the client id.
    eval_width = 3
    #: A field that a round's record has exactly when the round was evaluated.
    eval_key = "acc"
    #: Values per client sent to the server once before the first round (0: no exchange).
    setup_width = 0

    def __init__(self, cfg: ExperimentConfig, algorithm: Algorithm) -> None:
        self.cfg, self.algorithm = cfg, algorithm

    # ---- per rank: validation, data, model, local solver ----------------------------
    def check(self, n_ranks: int) -> None:
        """Checks that need no data (rank count, data set); raise ConfigError."""
        check_setup(self.cfg, n_ranks)

    def load_clients(self, clients: Sequence[int], device: torch.device) -> dict[int, ClientData]:
        return load_clients(self.cfg, clients, device)

    def fingerprint(self) -> str:
        """A fingerprint of the data the clients are cut from, both splits
        (:func:`~fedsheaf.data.sources.data_digest`): the run's checkpoints record it, so
        that a resume on data files changed since is refused."""
        return "+".join(data_digest(split) for split in self.data_splits())

    def data_splits(self) -> tuple[Samples, Samples]:
        """The train and test splits the clients' data are drawn from."""
        return data_splits(self.cfg)

    def build_model(self) -> nn.Module:
        """The common initial model (on CPU)."""
        return build_model(self.cfg)

    def make_runner(
        self, model: nn.Module, data: dict[int, ClientData], device: torch.device
    ) -> ClientRunner:
        cfg = self.cfg
        return ClientRunner(
            self.algorithm,
            model,
            data,
            cfg.train,
            cfg.federated.augment,
            cfg.seed,
            device,
            pad_fill=black_level(cfg.data.dataset),
        )

    def describe(self) -> str:
        """The data part of the run's first log line."""
        fc = self.cfg.federated
        if fc.partition.strip() == "dirichlet":
            return f"{self.cfg.data.dataset}, Dirichlet(α={fc.dirichlet_alpha:g}) partition"
        if fc.partition.strip() != "shards":
            return f"{self.cfg.data.dataset}, partition {fc.partition}"
        shards = count(fc.classes_per_client, "single-class shard")
        return f"{self.cfg.data.dataset}, {shards} per client" + (
            " (distinct classes)" if fc.distinct_classes else ""
        )

    # ---- optional one-time exchange before the first round ---------------------------
    def setup_rows(self, runner: ClientRunner) -> np.ndarray:
        """(hosted clients × (1 + setup_width)) float64 rows ``[client, ...]`` for the server."""
        return np.empty((0, 1 + self.setup_width))

    def server_setup(self, rows: np.ndarray, w0: np.ndarray) -> np.ndarray:
        """Server: every client's setup row (client-id order) and the initial shared
        vector -> the float64 reply broadcast to all ranks (``setup_reply_size`` values)."""
        return np.empty(0)

    @property
    def setup_reply_size(self) -> int:
        return 0

    def receive_setup(self, runner: ClientRunner, reply: np.ndarray) -> None:
        """Every rank: the server's reply."""

    # ---- server: after each aggregation ----------------------------------------------
    def server_round(
        self, round_: int, w: np.ndarray, uploads: np.ndarray, info: np.ndarray, w_new: np.ndarray
    ) -> dict[str, Any]:
        """Extra round metrics from the broadcast ``w``, the uploads (rows in client-id
        order, ``info`` rows ``[client, n_train, loss]`` alike) and the new vector."""
        return {}

    # ---- server: checkpoints ---------------------------------------------------------
    def server_state(self) -> dict[str, Any]:
        """Server-side state a resumed run needs beyond the shared vector and history."""
        return {}

    def load_server_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`server_state` (called after the setup exchange)."""

    # ---- evaluation and reporting --------------------------------------------------
    def evaluate(self, runner: ClientRunner, client: int, w: np.ndarray) -> Sequence[float]:
        """``eval_width`` numbers for one client's local evaluation."""
        return runner.evaluate(client, w)

    def round_record(self, rows: np.ndarray) -> dict[str, Any]:
        """Record fields of one evaluation from rows ``[client, *evaluate(...)]``."""
        return round_record(rows, self.cfg.federated.clients)

    def progress(self, record: dict[str, Any]) -> str:
        """The evaluation part of a round's progress line."""
        if "acc" not in record:
            return ""
        return f"  acc {record['acc']:.4f} (min {record['acc_min']:.3f})"

    def summarize(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        return summarize(history, self.algorithm, self.cfg.federated.eval_last)

    def result_table(self, summary: dict[str, Any]) -> str:
        return result_table(summary)
