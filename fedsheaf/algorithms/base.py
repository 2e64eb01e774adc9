"""The shared loop of the decentralized (graph-coupled) algorithms.

One instance runs on each rank and owns one agent. The loop is the local step
of SPEC §2 without the sheaf parts::

    for epoch:
        for step:  loss = CE(private batch) + regulariser(epoch, step);  SGD step
        end_epoch(epoch)
        evaluate: private accuracy, and communication accuracy by sending test
                  latents along every edge and decoding the neighbours' latents

Subclasses override only what differs: :meth:`regulariser` (the cooperation
term), :meth:`end_epoch` (e.g. map refresh), :meth:`prepare_transport` and
:meth:`edge_map` (how latents cross an edge at evaluation); where the loss itself
differs, :meth:`task_loss` (ComFed, FedProto, fused pilots), and where the latents
cross an edge in another form, :meth:`communication_accuracy` (the transported
variants).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from fedsheaf.algorithms.metrics import accuracy
from fedsheaf.config.sections import ExperimentConfig, TrainConfig
from fedsheaf.graphs import Graph
from fedsheaf.models.encoders import AgentModel
from fedsheaf.models.seeded import rng_state, set_rng_state
from fedsheaf.runtime import heartbeat
from fedsheaf.sheaf.maps import transport
from fedsheaf.util.errors import CheckpointError, FedsheafError
from fedsheaf.util.seeding import torch_generator
from fedsheaf.util.timers import NULL_TIMER, NullTimer, PhaseTimer


class TrainingDiverged(FedsheafError):
    """The loss became NaN or infinite."""


class Pending(Protocol):
    """An exchange in flight (see runtime.topology.PendingExchange)."""

    def wait(self) -> list[Any]: ...


@dataclass
class Arrived:
    """An exchange that finished when it started (neighbourhoods without MPI)."""

    matrices: list[Any]

    def wait(self) -> list[Any]:
        return self.matrices


#: The (rows, columns) of the matrix each neighbour sends, in neighbour order.
Shapes = Sequence[tuple[int, int]] | None


class Exchange(Protocol):
    """What an algorithm needs from the runtime's neighbourhood (see runtime.topology).

    A port may also say ``meets_other_agents = True`` (agents sharing a rank: a started
    exchange completes once the rank's other agents reach it), read with ``getattr``.
    """

    neighbours: list[int]

    def exchange(
        self, mat: torch.Tensor, shapes: Shapes = None, device: torch.device | None = None
    ) -> list[Any]: ...

    def exchange_each(
        self,
        mats: Sequence[torch.Tensor],
        shapes: Shapes = None,
        device: torch.device | None = None,
    ) -> list[Any]: ...

    def start_exchange(
        self, mat: torch.Tensor, shapes: Shapes = None, device: torch.device | None = None
    ) -> Pending: ...

    def start_exchange_each(
        self,
        mats: Sequence[torch.Tensor],
        shapes: Shapes = None,
        device: torch.device | None = None,
    ) -> Pending: ...

    def take_round_bytes(self) -> dict[int, int]: ...


class Reporter(Protocol):
    """Receives each rank's evaluation record (see fedsheaf.rundir.progress)."""

    def epoch(self, record: dict[str, Any]) -> None: ...


@dataclass
class AgentData:
    """One agent's tensors, already on its device."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_pilot: torch.Tensor
    n_classes: int
    y_pilot: torch.Tensor | None = None  # pilot labels (stratified/prototype pilot strategies)


@dataclass
class Agent:
    """Everything one rank owns."""

    id: int
    cfg: ExperimentConfig
    graph: Graph
    data: AgentData
    model: AgentModel
    device: torch.device
    steps_per_epoch: int


#: What :meth:`DecentralizedAlgorithm.regulariser` returns: a term, a term still
#: waiting for its inputs, or nothing.
Regulariser = torch.Tensor | Callable[[], torch.Tensor] | None


def build_optimizer(
    cfg: TrainConfig, params: Any, lr: float | None = None
) -> torch.optim.Optimizer:
    """SGD (optionally Nesterov) or Adam, as configured; ``lr`` overrides ``cfg.lr``."""
    lr = cfg.lr if lr is None else lr
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(
        params,
        lr=lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        nesterov=cfg.optimizer == "nesterov" and cfg.momentum > 0,
    )


def epoch_batches(n: int, batch: int, steps: int, gen: torch.Generator) -> list[torch.Tensor]:
    """``steps`` batches of indices into ``n`` samples, reshuffling on each pass.

    Agents hold different amounts of data but take the same number of steps
    per epoch (every step exchanges pilots); a smaller shard wraps around. A batch
    holds at most the ``n`` samples: ``train.batch_size`` beyond an agent's training set
    is capped at it, as FedRep's clients cap theirs.
    """
    batch = min(batch, n)
    need = steps * batch
    perm = torch.cat([torch.randperm(n, generator=gen) for _ in range(math.ceil(need / n))])
    return [perm[s * batch : (s + 1) * batch] for s in range(steps)]


class DecentralizedAlgorithm:
    """Independent local training; subclasses add cooperation through hooks."""

    name = "base"
    #: Per-phase timer (``with self.timer("exchange"): ...``); a no-op unless the
    #: benchmark installs a :class:`~fedsheaf.util.timers.PhaseTimer`.
    timer: NullTimer | PhaseTimer = NULL_TIMER

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        self.agent, self.nbr, self.reporter = agent, nbr, reporter
        self.cfg = agent.cfg
        self.model = agent.model
        own_lr = self.cfg.agents[agent.id].lr
        #: this agent's learning rate: ``agents[i].lr``, else ``train.lr``
        self.lr: float = self.cfg.train.lr if own_lr is None else own_lr
        self.optimizer = build_optimizer(self.cfg.train, self.model.parameters(), self.lr)
        self.is_head = {j: agent.graph.is_head(agent.id, j) for j in nbr.neighbours}

    @classmethod
    def check(cls, cfg: ExperimentConfig, data: AgentData) -> None:
        """Refuse what building this algorithm for an agent holding ``data`` would refuse,
        without communicating (``fedsheaf check``; the constructor finds it in a job).

        Constructors must raise such errors before any exchange with the neighbours: the
        runtime builds the algorithm inside a collective check (``World.agree``).
        """

    # ---- hooks -------------------------------------------------------------
    def task_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Loss of one private batch (subclasses may add terms on its latents)."""
        return F.cross_entropy(self.model.decode(self.model.encode(x)), y)  # (no forward needed)

    def regulariser(self, epoch: int, step: int) -> Regulariser:
        """Extra loss term of this step (None: independent training).

        A callable instead of a tensor is a term that still waits for something in
        flight (the neighbours' pilots): the loop back-propagates the task loss
        first, then calls it and back-propagates the term. The gradients are the
        same sum ∇CE + ∇R either way.
        """
        return None

    def end_epoch(self, epoch: int) -> None:
        """Called after the last step of every epoch."""

    def prepare_transport(self) -> None:
        """Called before communication accuracy is measured (e.g. fit post-hoc maps)."""

    def to_edge_space(self, z: torch.Tensor) -> torch.Tensor:
        """This agent's latents (n × d_i) as they are sent along edges."""
        return z

    def from_edge_space(self, z: torch.Tensor) -> torch.Tensor:
        """Received, transported latents (n × d_i) as this agent's head expects them."""
        return z

    def edge_map(self, j: int) -> torch.Tensor:
        """The map of edge {i, j} in head × tail shape."""
        raise NotImplementedError

    def summary_extras(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Rank 0: network-level numbers for summary.json from every agent's final record."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """Algorithm state beyond model and optimizer that a resumed run needs."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    # ---- checkpoints -------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything this rank needs to continue after the current epoch."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": rng_state(self.model),
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; hyperparameters (lr, …) stay as configured now."""
        configured = [
            {k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups
        ]
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise CheckpointError(
                f"agent {self.agent.id}: checkpoint does not fit this model/config: {exc}"
            ) from None
        for group, hyper in zip(self.optimizer.param_groups, configured, strict=True):
            group.update(hyper)
        set_rng_state(self.model, state["rng"])
        self.load_extra_state(state["extra"])

    # ---- the loop ----------------------------------------------------------
    def train_epoch(self, epoch: int) -> float:
        a, tc = self.agent, self.cfg.train
        self.model.train()
        gen = torch_generator(self.cfg.seed, "batches", a.id, epoch)
        total, timer = 0.0, self.timer
        for step, idx in enumerate(
            epoch_batches(len(a.data.y_train), tc.batch_size, a.steps_per_epoch, gen)
        ):
            with timer("data"):
                idx = idx.to(a.device)
                x, y = a.data.x_train[idx], a.data.y_train[idx]
            with timer("forward"):
                loss = self.task_loss(x, y)
                # checked before the exchange, so a diverged agent stops before its neighbours do
                self._check_finite(loss, epoch, step)
            extra = self.regulariser(epoch, step)  # times its own phases
            self.optimizer.zero_grad(set_to_none=True)
            to_backward = loss
            if callable(extra):
                with timer("backward"):
                    loss.backward()
                extra = to_backward = extra()
                loss = loss.detach() + extra
            elif extra is not None:
                loss = to_backward = loss + extra
            if extra is not None:
                self._check_finite(loss, epoch, step)
            with timer("backward"):
                to_backward.backward()
            with timer("optimizer"):
                if tc.clip is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip)
                self.optimizer.step()
                total += float(loss.detach())
            heartbeat.beat()  # (the step watchdog: train.step_timeout)
        return total / a.steps_per_epoch

    def _check_finite(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"agent {self.agent.id}: loss became {loss.item()} in epoch {epoch + 1}, step "
                f"{step + 1} (try a smaller train.lr, agents[{self.agent.id}].lr or sheaf.lam)"
            )

    @torch.no_grad()
    def latents(self, x: torch.Tensor, batch: int = 1024) -> torch.Tensor:
        self.model.eval()
        return torch.cat([self.model.encode(x[i : i + batch]) for i in range(0, len(x), batch)])

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        return self.model.decode(z)

    @torch.no_grad()
    def communication_accuracy(self, x: torch.Tensor, y: torch.Tensor) -> dict[int, float]:
        """Eq. 22: decode every neighbour's transported latents, score on its labels."""
        a = self.agent
        z = self.to_edge_space(self.latents(x))
        message = torch.cat([z, y.to(z.dtype).unsqueeze(1)], dim=1)
        received = self.nbr.exchange(message, device=a.device)
        out = {}
        for j, m in zip(self.nbr.neighbours, received, strict=True):
            zj, yj = m[:, :-1], m[:, -1].long()
            v = self.edge_map(j)
            mapped = transport(zj, v, self.is_head[j])
            out[j] = accuracy(self.decode(self.from_edge_space(mapped)), yj)
        return out

    def evaluate(self) -> dict[str, Any]:
        a, d = self.agent, self.agent.data
        self.prepare_transport()
        record: dict[str, Any] = {
            "agent": a.id,
            "dim": a.graph.dims[a.id],
            "degree": len(self.nbr.neighbours),
        }
        for split, (x, y) in {"": (d.x_test, d.y_test), "_val": (d.x_val, d.y_val)}.items():
            record[f"private_acc{split}"] = accuracy(self.decode(self.latents(x)), y)
            comm = self.communication_accuracy(x, y)
            record[f"comm_acc{split}"] = (sum(comm.values()) / len(comm)) if comm else float("nan")
            record[f"comm_by_neighbour{split}"] = comm
        return record

    def other_traffic(self) -> dict[str, int]:
        """Bytes this agent moved in the epoch besides its graph neighbourhood (a server's
        line, for the centralized baselines), by record key."""
        return {}

    def run(self, first_epoch: int = 0, after_epoch: Callable[[int], None] | None = None) -> None:
        """Train from epoch ``first_epoch + 1`` on; ``after_epoch(n)`` runs after epoch ``n``."""
        epochs, every = self.cfg.train.epochs, self.cfg.train.eval_every
        for epoch in range(first_epoch, epochs):
            start = time.perf_counter()
            loss = self.train_epoch(epoch)
            self.end_epoch(epoch)
            seconds = time.perf_counter() - start
            sent = sum(self.nbr.take_round_bytes().values())
            other = self.other_traffic()
            record: dict[str, Any] = {"agent": self.agent.id}
            if (epoch + 1) % every == 0 or epoch + 1 == epochs:
                record = self.evaluate()
                record["eval_bytes_sent"] = sum(self.nbr.take_round_bytes().values())
            record.update(epoch=epoch + 1, loss=loss, seconds=seconds, bytes_sent=sent, **other)
            self.reporter.epoch(record)
            if after_epoch is not None:
                after_epoch(epoch + 1)
