"""Head-only FedAvg (SPEC §4, seed 002): private backbones, one shared linear head (W, b).

Each round every selected client trains its backbone and the broadcast head
together on the UFM objective (``head.lam_H``, ``head.lam_W``), optionally with a
proximal term (``head.rho``), the moment correction (``head.moment_gamma``) and
alignment of the trained head to the broadcast (``head.align``); the server
averages the heads with ``p_m = N_m/N``. Before the first round the clients send
their target moments (μ_m, Σ_m, N_m) to the server, which returns Σ_cen and
tracks the server Gram ``W_t W_tᵀ`` against ``G_⋆`` and ``G_cen`` every round
(:mod:`.head_gram`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated.fedavg import FedAvg
from fedsheaf.algorithms.federated.head.data import load_regression_clients, regression_splits
from fedsheaf.algorithms.federated.head.gram import (
    GramTracker,
    instance_from_rows,
    moment_rows,
)
from fedsheaf.algorithms.federated.head.model import UFMNet, build_ufm_net
from fedsheaf.algorithms.federated.head.runner import HeadRunner
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.algorithms.federated.task import Task
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.config.ranks import check_ranks
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.data.datasets_registry import dataset_spec
from fedsheaf.data.sources import Samples
from fedsheaf.util.errors import CheckpointError, ConfigError
from fedsheaf.util.seeding import derive_seed

__all__ = ["HeadFedAvg", "HeadTask"]

#: Targets of both regression sets (diabetes3: progression, bmi, bp; geo: dx, dy, log s).
N_TARGETS = 3
#: Per-round record keys shown in the progress line and the final table.
GRAM_KEYS = (
    "gram_err_star",
    "gram_err_cen",
    "dir_err_star",
    "dir_err_cen",
    "delta",
    "local_err",
    "traj_err",
)


class HeadFedAvg(FedAvg):
    """Shares the head; trains head and backbone together for ``local_epochs`` epochs."""

    name = "head_fedavg"
    shared = "head"

    def make_task(self, cfg: ExperimentConfig) -> Task:
        return HeadTask(cfg, self)


class HeadTask(Task):
    """Regression clients, :class:`~.head_model.UFMNet`, UFM local solver, Gram tracking."""

    eval_width = 5
    eval_key = "test_mse"

    def __init__(self, cfg: ExperimentConfig, algorithm: FedAvg) -> None:
        super().__init__(cfg, algorithm)
        self.C = N_TARGETS
        self.P = cfg.head.features or 2 * N_TARGETS
        self.input_shape: tuple[int, ...] | None = None
        self.tracker: GramTracker | None = None
        self.initial: dict[str, float] = {}

    # ---- setup -------------------------------------------------------------------
    def check(self, n_ranks: int) -> None:
        cfg, hc = self.cfg, self.cfg.head
        check_ranks(cfg, n_ranks)
        if not cfg.federated.weighted:
            raise ConfigError(
                "head_fedavg averages heads with p_m = N_m/N (the theory's weights); "
                "federated.weighted must be true"
            )
        if cfg.train.weight_decay != 0:
            raise ConfigError(
                f"train.weight_decay={cfg.train.weight_decay} would add an L2 term to "
                "head_fedavg's objective, whose penalties (head.lam_H, head.lam_W) the Gram "
                "predictions are derived for; set train.weight_decay=0"
            )
        if self.P < self.C:
            raise ConfigError(
                f"head.features={self.P} must be at least the {self.C} regression targets"
            )
        if hc.data == "geo":
            shape = dataset_spec(cfg.data, "train").shape
            if len(shape) != 3 or min(shape[1:]) < 8:
                raise ConfigError(
                    f"head.data=geo needs images (C, H, W) of at least 8x8; "
                    f"data.dataset={cfg.data.dataset} gives samples of shape {shape}"
                )

    def data_splits(self) -> tuple[Samples, Samples]:
        return regression_splits(self.cfg)

    def load_clients(self, clients: Sequence[int], device: torch.device) -> dict[int, ClientData]:
        data = load_regression_clients(self.cfg, clients, device)
        geo = self.cfg.head.data == "geo"
        shape = dataset_spec(self.cfg.data, "train").shape if geo else (8,)
        self.input_shape = tuple(shape)
        return data

    def build_model(self) -> UFMNet:
        if self.input_shape is None:
            raise RuntimeError("load_clients must run before build_model")
        return build_ufm_net(
            self.input_shape,
            self.cfg.head.backbone,
            self.P,
            self.C,
            seed=derive_seed(self.cfg.seed, "model"),
        )

    def make_runner(
        self, model: Any, data: dict[int, ClientData], device: torch.device
    ) -> ClientRunner:
        cfg = self.cfg
        return HeadRunner(self.algorithm, model, data, cfg.train, cfg.head, cfg.seed, device)

    def describe(self) -> str:
        hc = self.cfg.head
        data = "diabetes3" if hc.data == "diabetes3" else f"geo view of {self.cfg.data.dataset}"
        opts = [f"lam_H={hc.lam_H:g}", f"lam_W={hc.lam_W:g}", f"rho={hc.rho:g}"]
        opts += ["aligned"] if hc.align else []
        opts += [f"gamma={hc.moment_gamma:g}"] if hc.moment_gamma else []
        return f"{data} (C={self.C}, P={self.P}, projection partition), {' '.join(opts)}"

    # ---- the moment exchange -------------------------------------------------------
    @property
    def setup_width(self) -> int:  # type: ignore[override]
        return 1 + self.C + self.C * self.C

    @property
    def setup_reply_size(self) -> int:
        return self.C * self.C

    def setup_rows(self, runner: ClientRunner) -> np.ndarray:
        assert isinstance(runner, HeadRunner)
        rows = [
            moment_rows(c, runner.clients[c].n_train, *runner.moments[c])
            for c in runner.home  # its home clients: a worker may hold every client
        ]
        return np.stack(rows) if rows else np.empty((0, 1 + self.setup_width))

    def server_setup(self, rows: np.ndarray, w0: np.ndarray) -> np.ndarray:
        hc = self.cfg.head
        inst = instance_from_rows(rows, hc.lam_H, hc.lam_W)
        W0, b0 = self.split(w0)
        self.tracker = GramTracker(inst, hc.moment_gamma, W0)
        self.initial = self.tracker.errors(W0, b0)
        return np.ascontiguousarray(inst.Sigma_cen.reshape(-1), dtype=np.float64)

    def receive_setup(self, runner: ClientRunner, reply: np.ndarray) -> None:
        assert isinstance(runner, HeadRunner)
        runner.set_sigma_cen(reply.reshape(self.C, self.C))

    # ---- server: every round ---------------------------------------------------------
    def split(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W (C×P), b (C)) from a shared vector (``head.weight`` then ``head.bias``)."""
        v = np.asarray(vec, dtype=np.float64)
        return v[: self.C * self.P].reshape(self.C, self.P), v[self.C * self.P :]

    def server_round(
        self, round_: int, w: np.ndarray, uploads: np.ndarray, info: np.ndarray, w_new: np.ndarray
    ) -> dict[str, Any]:
        if self.tracker is None:
            raise RuntimeError("server_round before server_setup")
        heads = np.stack([self.split(u)[0] for u in uploads])
        W_new, b_new = self.split(w_new)
        return self.tracker.round(
            self.split(w)[0], info[:, 0].astype(np.int64), heads, W_new, b_new
        )

    def server_state(self) -> dict[str, Any]:
        if self.tracker is None:
            return {}
        return {"G_rec": torch.from_numpy(self.tracker.G_rec.copy())}

    def load_server_state(self, state: dict[str, Any]) -> None:
        """The exact recursion's Gram; the references are rebuilt by the setup exchange."""
        if self.tracker is None:
            raise RuntimeError("load_server_state before server_setup")
        G = state.get("G_rec")
        if G is None or tuple(G.shape) != self.tracker.G_rec.shape:
            raise CheckpointError("the checkpoint's Gram recursion does not fit this head")
        self.tracker.G_rec = G.numpy().astype(np.float64)

    # ---- evaluation and reporting ----------------------------------------------------
    def round_record(self, rows: np.ndarray) -> dict[str, Any]:
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        if rows.shape[0] != self.cfg.federated.clients:
            raise RuntimeError("evaluation rows do not cover every client exactly once")
        sse_te, n_te, sse_tr, n_tr, obj = rows[:, 1:].T
        p = n_tr / n_tr.sum()
        return {
            "test_mse": float(sse_te.sum() / max(n_te.sum(), 1.0)),
            "train_mse": float(sse_tr.sum() / n_tr.sum()),
            "objective": float(p @ obj),
            "client_mse": [
                round(float(s / max(n, 1.0)), 6) for s, n in zip(sse_te, n_te, strict=True)
            ],
        }

    def progress(self, record: dict[str, Any]) -> str:
        out = f"  mse {record['test_mse']:.4f}" if "test_mse" in record else ""
        if "gram_err_star" in record:
            out += (
                f"  G* {record['gram_err_star']:.2e}  Gcen {record['gram_err_cen']:.2e}"
                f"  delta {record['delta']:.2e}"
            )
        return out

    def summarize(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        last = history[-1] if history else {}
        evaluated = [r for r in history if "test_mse" in r]
        final_eval = evaluated[-1] if evaluated else {}
        out: dict[str, Any] = {
            "score": final_eval.get("test_mse", float("nan")),
            "score_is": "test MSE after the last round (lower is better)",
            "rounds": len(history),
            "test_mse": final_eval.get("test_mse"),
            "train_mse": final_eval.get("train_mse"),
            "objective": final_eval.get("objective"),
            "final": {
                k: last[k]
                for k in (*GRAM_KEYS, "gram_err_pred", "dir_err_pred", "bias_err")
                if k in last
            },
            "initial": self.initial,
            "head": dataclasses.asdict(self.cfg.head),
        }
        if self.tracker is not None:
            out["references"] = self.tracker.references()
        return out

    def result_table(self, summary: dict[str, Any]) -> str:
        f = summary.get("final", {})
        hc = summary.get("head", {})
        rows = [
            f"algorithm   {summary['algorithm']}  ({summary['n_clients']} clients, "
            f"{summary['rounds']} rounds; rho={hc.get('rho')}, align={hc.get('align')}, "
            f"gamma={hc.get('moment_gamma')})",
            f"test mse    {summary['test_mse']:.4f}   train mse {summary['train_mse']:.4f}"
            f"   objective {summary['objective']:.5f}",
        ]
        if f:
            rows += [
                f"G_t vs {ref:<7} rel err {f[f'gram_err_{key}']:.3e}   "
                f"direction {f[f'dir_err_{key}']:.3e}"
                for ref, key in (("G_star", "star"), ("G_cen", "cen"))
            ]
            rows.append(
                f"selection      delta {f['delta']:.3e}   vs exact recursion {f['traj_err']:.3e}"
            )
        return "\n".join(rows)
