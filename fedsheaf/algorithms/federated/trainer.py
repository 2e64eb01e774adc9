"""Local training and evaluation of the clients hosted on one rank (no MPI).

One rank may host many clients; they take turns in one model. A client's
*state* is its private parameters (those not shared); before a client trains
or is evaluated, the model is loaded with the broadcast shared vector and the
client's own private parameters. A rank may hold more clients than it is *home*
to (dynamic or balanced placement: any worker may train any client); it evaluates and
checkpoints its home clients only, and the runtime keeps the other clients'
states current with :meth:`ClientRunner.private_rows` /
:meth:`ClientRunner.load_private_rows`. A local update runs the algorithm's schedule
phase by phase -- each phase unfreezes one part of the model and builds a fresh
optimiser over just that part (see :mod:`.base` for what that means for
momentum and weight decay) -- then returns the shared part as a flat vector.
With ``federated.prox_mu`` = μ > 0 (FedProx) each step's loss also carries
:func:`proximal_penalty` over the shared parameters the phase trains, anchored at
the broadcast vector.

A head-only phase without augmentation trains the head on the body's features
computed once (the body is frozen and the model has no dropout or BatchNorm,
so this is the same computation as running the body on every batch, and much
cheaper); a model with dropout or BatchNorm runs its body on every batch. The head
and body are found from the model's ``HEAD`` attribute
(:func:`~fedsheaf.models.registry.head_names`); dropout masks
(:class:`~fedsheaf.models.seeded.GeneratorDropout`) come from a generator of
(seed, client, round, phase).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import TrainingDiverged, build_optimizer
from fedsheaf.algorithms.federated.params import ParamSet
from fedsheaf.algorithms.federated.schedule import Algorithm, Phase
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.config.sections import TrainConfig
from fedsheaf.data.loaders import batches, n_batches, random_crop_flip
from fedsheaf.models.registry import body_names, has_seeded_dropout, head_module, head_names
from fedsheaf.models.seeded import GeneratorDropout, set_dropout_generator
from fedsheaf.runtime import heartbeat
from fedsheaf.util.errors import CheckpointError
from fedsheaf.util.seeding import derive_seed, torch_generator

EVAL_BATCH = 1000
#: Modules whose output depends on the training mode or the batch.
_MODE_DEPENDENT = (
    torch.nn.modules.batchnorm._BatchNorm,
    torch.nn.modules.dropout._DropoutNd,
    GeneratorDropout,
)


class ClientRunner:
    """Trains and evaluates the clients of one rank, one at a time.

    Parameters
    ----------
    algorithm:
        Decides the shared part and the schedules.
    model:
        The common initial model (moved to ``device``); it must provide
        ``representation(x)`` and its head module under the attribute named by
        ``model.HEAD`` (default ``"head"``): :mod:`fedsheaf.models.registry`.
    clients:
        The clients this rank may train, and their data. Its *home* clients
        (:attr:`home`, default: all of them) are the ones it evaluates and saves.
    train:
        Batch size, optimiser, lr, momentum, weight decay, grad clip.
    augment:
        Random crop (pad 4) and horizontal flip of training batches.
    pad_fill:
        What the crop pads with, per channel, in the data's normalised units (the
        dataset's :func:`~fedsheaf.data.sources.black_level`, as torchvision pads).
    seed:
        Run seed; batches and augmentation derive from (seed, client, round, phase).
    """

    #: A head-only phase without augmentation feeds the head pre-computed features
    #: (the frozen body runs once per phase, not once per batch): :meth:`batch_loss`
    #: then gets the head module and features instead of the model and inputs.
    caches_head_features = True

    def __init__(
        self,
        algorithm: Algorithm,
        model: Any,  # an nn.Module with representation() and a head named by HEAD
        clients: Mapping[int, ClientData],
        train: TrainConfig,
        augment: bool,
        seed: int,
        device: torch.device,
        pad_fill: Sequence[float] = (0.0,),
    ) -> None:
        self.algorithm, self.train, self.augment, self.seed = algorithm, train, augment, seed
        self.pad_fill = tuple(pad_fill)
        self.model = model.to(device)
        self.clients = dict(clients)
        names = [n for n, _ in self.model.named_parameters()]
        self.parts = {
            "all": names,
            "head": head_names(self.model),
            "body": body_names(self.model),
            "none": [],
        }
        #: Whether a head-only phase may feed the head features computed once: not where
        #: dropout or BatchNorm make the body's output depend on the mode or the batch.
        self.head_features_exact = not any(
            isinstance(m, _MODE_DEPENDENT) for m in self.model.modules()
        )
        self._dropout = has_seeded_dropout(self.model)
        self.shared = ParamSet(self.model, self.parts[algorithm.shared])
        self.private = [n for n in names if n not in set(self.shared.names)]
        self.private_size = ParamSet(self.model, self.private).size
        initial = self._snapshot(self.private)  # shared by all clients until they train
        self.state: dict[int, dict[str, torch.Tensor]] = {c: initial for c in self.clients}
        self.home: list[int] = sorted(self.clients)
        #: FedProx's μ (``federated.prox_mu``): a local update adds (μ/2)‖w − w_global‖²
        #: over the shared parameters a phase trains (0: none).
        self.prox_mu = 0.0
        self._anchor: dict[str, torch.Tensor] = {}  # the broadcast shared parameters

    # ---- client state ---------------------------------------------------------
    def _snapshot(self, names: list[str]) -> dict[str, torch.Tensor]:
        params = dict(self.model.named_parameters())
        return {n: params[n].detach().clone() for n in names}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this rank: its home clients' private
        parameters and the model's buffers (batch order and augmentation need
        nothing: they derive from (seed, client, round, phase))."""
        return {
            "clients": {c: dict(self.state[c]) for c in self.home},
            "buffers": {n: b.detach().clone() for n, b in self.model.named_buffers()},
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (tensors may come from the CPU).

        Only the home clients' states are restored; other clients this rank holds
        keep theirs until the runtime sends them (:meth:`load_private_rows`).
        """
        saved = state["clients"]
        if sorted(saved) != self.home:
            raise CheckpointError(
                f"checkpoint holds clients {sorted(saved)}, this rank hosts {self.home}"
            )
        names = {n for n, _ in self.model.named_parameters()}
        if any(not set(self.private) <= set(s) <= names for s in saved.values()):
            raise CheckpointError("checkpoint client parameters do not match this model")
        device = next(self.model.parameters()).device
        for c in self.home:
            self.state[c] = {n: v.to(device) for n, v in saved[c].items()}
        buffers = dict(self.model.named_buffers())
        if set(state["buffers"]) != set(buffers):
            raise CheckpointError("checkpoint model buffers do not match this model")
        for name, value in state["buffers"].items():
            buffers[name].copy_(value)

    @torch.no_grad()
    def private_rows(self, clients: Sequence[int]) -> np.ndarray:
        """``clients``' private parameters as rows (k × :attr:`private_size`, float32)."""
        rows = np.empty((len(clients), self.private_size), dtype=np.float32)
        for row, c in zip(rows, clients, strict=True):
            if self.private_size:
                state = self.state[c]
                flat = torch.cat([state[n].reshape(-1) for n in self.private])
                row[:] = flat.to("cpu", torch.float32).numpy()
        return rows

    @torch.no_grad()
    def load_private_rows(self, clients: Sequence[int], rows: np.ndarray) -> None:
        """Set ``clients``' private parameters from :meth:`private_rows` (bitwise)."""
        if rows.shape != (len(clients), self.private_size):
            raise ValueError(
                f"expected {len(clients)} rows of {self.private_size} values, got {rows.shape}"
            )
        params = dict(self.model.named_parameters())
        for c, row in zip(clients, rows, strict=True):
            src, offset, state = torch.from_numpy(np.array(row, dtype=np.float32)), 0, {}
            for n in self.private:
                p = params[n]
                state[n] = (
                    src[offset : offset + p.numel()].view(p.shape).to(p.device, p.dtype).clone()
                )
                offset += p.numel()
            self.state[c] = state

    @torch.no_grad()
    def install(self, client: int, shared: np.ndarray) -> None:
        """Load the broadcast shared vector and ``client``'s own parameters."""
        self.shared.load(self.model, shared)
        params = dict(self.model.named_parameters())
        for name, value in self.state[client].items():
            params[name].copy_(value)

    # ---- training -------------------------------------------------------------
    def local_update(
        self, client: int, shared: np.ndarray, round_: int
    ) -> tuple[np.ndarray, float]:
        """Run the local schedule; return the new shared vector and the mean loss."""
        self.install(client, shared)
        if self.prox_mu > 0:
            self._anchor = self._snapshot(self.shared.names)
        try:
            loss = self.train_locally(client, round_)
        finally:
            self._anchor = {}
        self.state[client] = self._snapshot(self.private)
        return self.shared.flatten(self.model), loss

    def train_locally(self, client: int, round_: int) -> float:
        """The local schedule of ``client`` (installed); its mean batch loss."""
        return self.run_schedule(client, self.algorithm.local_schedule(), round_)

    def final_update(self, client: int, shared: np.ndarray, round_: int) -> float:
        """Run the final schedule (e.g. head fine-tuning); the client keeps what it trained."""
        schedule = self.algorithm.final_schedule()
        self.install(client, shared)
        loss = self.run_schedule(client, schedule, round_)
        trained = {n for p in schedule if p.epochs for n in self.parts[p.part]}
        keep = [n for n, _ in self.model.named_parameters() if n in trained or n in self.private]
        self.state[client] = self._snapshot(keep)
        return loss

    def run_schedule(self, client: int, schedule: list[Phase], round_: int) -> float:
        """Train ``client`` (already installed) through ``schedule``; mean batch loss."""
        total, steps = 0.0, 0
        for k, phase in enumerate(schedule):
            if phase.epochs == 0:
                continue
            loss_sum, n = self._run_phase(client, phase, round_, k)
            total, steps = total + loss_sum, steps + n
        for p in self.model.parameters():
            p.requires_grad_(True)
        return total / steps if steps else float("nan")

    def _run_phase(self, client: int, phase: Phase, round_: int, k: int) -> tuple[float, int]:
        data, tc = self.clients[client], self.train
        trainable = set(self.parts[phase.part])
        params = []
        for name, p in self.model.named_parameters():
            p.requires_grad_(name in trainable)
            if name in trainable:
                params.append(p)
        optimizer = build_optimizer(tc, params)  # fresh: no momentum from earlier phases
        prox = [
            (p, self._anchor[name])
            for name, p in self.model.named_parameters()
            if name in trainable and name in self._anchor
        ]
        cached = (
            self.caches_head_features
            and self.head_features_exact
            and phase.part == "head"
            and not self.augment
        )
        if cached:
            forward: Any = head_module(self.model)
            inputs = self._features(data.x_train)
        else:
            forward, inputs = self.model, data.x_train
        gen = torch_generator(self.seed, "augment", client, round_, k) if self.augment else None
        if self._dropout:  # (a plug-in model's; the FedRep CNN has none)
            device = next(self.model.parameters()).device
            drop = torch.Generator(device=device)
            set_dropout_generator(
                self.model, drop.manual_seed(derive_seed(self.seed, "dropout", client, round_, k))
            )
        batch_seed = derive_seed(self.seed, "batches", client, round_, k)
        index = np.arange(data.n_train)
        schedule = self.lr_schedule(
            optimizer, phase.epochs * n_batches(data.n_train, tc.batch_size)
        )
        self.model.train()
        loss_sum, steps = 0.0, 0
        for epoch in range(phase.epochs):
            for xb, yb in batches(inputs, data.y_train, index, tc.batch_size, batch_seed, epoch):
                if gen is not None:
                    xb = random_crop_flip(xb, 4, gen, fill=self.pad_fill)
                loss = self.batch_loss(client, forward, xb, yb)
                if not torch.isfinite(loss):
                    raise TrainingDiverged(
                        f"client {client}: loss became {loss.item()} in round {round_ + 1} "
                        f"({phase.part} phase, epoch {epoch + 1}); try a smaller train.lr"
                    )
                optimizer.zero_grad(set_to_none=True)
                if prox:  # (the recorded loss stays the task's own)
                    (loss + proximal_penalty(prox, self.prox_mu)).backward()
                else:
                    loss.backward()
                if tc.clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, tc.clip)
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                loss_sum += float(loss.detach())
                steps += 1
                heartbeat.beat()  # (the step watchdog: train.step_timeout)
        return loss_sum, steps

    def batch_loss(self, client: int, forward: Any, xb: torch.Tensor, yb: torch.Tensor) -> Any:
        """Training loss of one batch: cross-entropy here; other tasks override it."""
        return F.cross_entropy(forward(xb), yb)

    def lr_schedule(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        """Per-step learning-rate schedule of one phase (``None``: constant ``train.lr``)."""
        return None

    @torch.no_grad()
    def _features(self, x: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        return torch.cat(
            [self.model.representation(x[i : i + EVAL_BATCH]) for i in range(0, len(x), EVAL_BATCH)]
        )

    # ---- evaluation -----------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, client: int, shared: np.ndarray) -> tuple[int, int, float]:
        """(correct, total, summed cross-entropy) on the client's local test set."""
        self.install(client, shared)
        self.model.eval()
        data = self.clients[client]
        correct, loss = 0, 0.0
        for i in range(0, len(data.y_test), EVAL_BATCH):
            logits = self.model(data.x_test[i : i + EVAL_BATCH])
            y = data.y_test[i : i + EVAL_BATCH]
            correct += int((logits.argmax(dim=1) == y).sum())
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
        return correct, len(data.y_test), loss


def proximal_penalty(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], mu: float) -> torch.Tensor:
    """FedProx's proximal term (Li et al., 2020): ``(μ/2) Σ ‖w − w_global‖²`` over the
    ``(parameter, broadcast value)`` pairs; its gradient is ``μ (w − w_global)``."""
    terms = [((p - ref) ** 2).sum() for p, ref in pairs]
    return 0.5 * mu * torch.stack(terms).sum() if terms else torch.zeros(())
