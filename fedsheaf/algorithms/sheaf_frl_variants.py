"""Sheaf-FRL variants that send *transported* pilots (seed 000, App. D and F).

In these variants agent i keeps, per neighbour j, its own map ``P_ij`` from its latent
space into the edge stalk (the head's space, dimension ``max(d_i, d_j)``) and sends
``m_{i→j} = P_ij A_i`` — a different message per neighbour (``nbr.exchange_each``).
The penalty of edge {i, j} seen from i is ``‖P_ij A_i − m_{j→i}‖²_F``; since
``P_ijᵀP_ij = I`` its gradient is ``A_i − P_ijᵀ m_{j→i}``, the SPEC §2 gradient with the
effective map ``P_ijᵀ P_ji`` (seed 000, Eq. 42). A refit of ``P_ij`` is the closed form
``argmin_P ‖P A_i − m_{j→i}‖`` (:func:`~fedsheaf.sheaf.maps.stiefel_map`): a full SVD when
the stalk is i's own space (O(d_i)), a thin one otherwise.

* **homogeneous** (Algorithm 2, equal d): heads keep ``P = I`` (they send raw pilots and
  solve nothing); tails fit ``P ∈ O(d)``. One SVD per edge instead of two.
* **strict** (Algorithms 3/4): both ends start from random maps and refit, so a
  raw ``A_i`` never leaves its rank. The first maps and the encoder's initial weights
  are drawn from the agent's own secret (``sheaf.mask_secret``,
  :mod:`fedsheaf.sheaf.secret`), never from the shared run seed: a neighbour that knows
  the config can rebuild neither (docs/privacy.md: the threat model and what is still
  revealed). With ``map_refresh: step`` both ends refit every
  step from the messages just received (Algorithm 3 literally): each end's effective
  map ``P_ijᵀP_ji`` in that step's gradient is then the best fit on that batch, but the
  pair of *new* maps no longer matches (each was fitted against the other's old one),
  so for evaluation the tails refit once more against the heads' current maps on a
  pilot batch (evaluation maps only: training goes on with the maps it had, so how
  often a run evaluates changes none of its numbers). With a pilot window the two ends
  take turns — heads at refreshes 0, 2, 4, …, tails at 1, 3, … — so the maps used during
  an epoch always match.

Test latents for communication accuracy travel the same way: ``P_ij z`` out, and the
receiver maps what it gets back with ``P_jiᵀ`` (its own map) before decoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedsheaf.algorithms.base import Agent, AgentData, Exchange, Pending, Reporter
from fedsheaf.algorithms.metrics import accuracy
from fedsheaf.algorithms.sheaf_frl import SheafFRL
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.models.seeded import seeded_init_
from fedsheaf.sheaf.maps import random_stiefel, stiefel_map
from fedsheaf.sheaf.penalty import transported_penalty
from fedsheaf.sheaf.secret import agent_secret, secret_generator, secret_seed
from fedsheaf.util.errors import ConfigError


class TransportedSheafFRL(SheafFRL):
    """Shared machinery: per-neighbour maps ``P_ij`` and transported messages."""

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        super().__init__(agent, nbr, reporter)
        dims, i = agent.graph.dims, agent.id
        self.stalk = {j: max(dims[i], dims[j]) for j in nbr.neighbours}
        self.out_maps = {j: self.initial_map(j).to(agent.device) for j in nbr.neighbours}
        self.msg_shapes = [(self.stalk[j], self.pilots.columns) for j in nbr.neighbours]
        self.refreshes = 0
        #: the strict per-step variant's maps refitted for evaluation (else ``out_maps``)
        self.eval_maps: dict[int, torch.Tensor] | None = None

    # ---- what the variants decide -------------------------------------------
    def initial_map(self, j: int) -> torch.Tensor:
        """``P_ij`` before the first refit (stalk × d_i)."""
        raise NotImplementedError

    def side_refits(self, head: bool, refresh: int) -> bool:
        """Whether the head (or tail) end of an edge refits its map at refresh ``refresh``."""
        raise NotImplementedError

    def refits(self, j: int, refresh: int) -> bool:
        """Whether this agent refits ``P_ij`` at refresh number ``refresh``."""
        return self.side_refits(self.is_head[j], refresh)

    # ---- the step -----------------------------------------------------------
    def send_pilots(self, own: torch.Tensor) -> Pending:
        return self.nbr.start_exchange_each(
            [self.out_maps[j] @ own for j in self.nbr.neighbours],
            shapes=self.msg_shapes,
            device=self.agent.device,
        )

    def penalty(self, a_own: torch.Tensor, received: list[torch.Tensor]) -> torch.Tensor:
        own = a_own.detach()
        refresh_now = self.cfg.sheaf.map_refresh == "step" or self.refreshes == 0
        for j, m in zip(self.nbr.neighbours, received, strict=True):
            if refresh_now and self.refits(j, self.refreshes):
                self.out_maps[j] = stiefel_map(m, own)
            # a message sent just before the sender refitted does not belong in the window,
            # and only the end that refits at the next refresh needs one
            stale = refresh_now and self.side_refits(not self.is_head[j], self.refreshes)
            fits_next = self.refits(j, self.refreshes + int(refresh_now))
            if self.cfg.sheaf.map_refresh == "epoch" and fits_next and not stale:
                self.window.add(j, m, own)
        if refresh_now:
            self.refreshes += 1
        maps = [self.out_maps[j] for j in self.nbr.neighbours]
        return transported_penalty(a_own, maps, received, self.lam_i)

    def end_epoch(self, epoch: int) -> None:
        if self.cfg.sheaf.map_refresh != "epoch":
            return
        for j in self.nbr.neighbours:
            if self.refits(j, self.refreshes) and self.window.samples(j) > 0:
                self.out_maps[j] = self.window.fit(j, dtype=torch.float32).to(self.agent.device)
        self.refreshes += 1
        self.window.reset()

    @torch.no_grad()
    def communication_accuracy(self, x: torch.Tensor, y: torch.Tensor) -> dict[int, float]:
        z = self.latents(x)
        labels = y.to(z.dtype).unsqueeze(1)
        maps = self.eval_maps or self.out_maps
        received = self.nbr.exchange_each(
            [torch.cat([z @ maps[j].T, labels], dim=1) for j in self.nbr.neighbours],
            device=self.agent.device,
        )
        out = {}
        for j, m in zip(self.nbr.neighbours, received, strict=True):
            zj, yj = m[:, :-1], m[:, -1].long()
            out[j] = accuracy(self.decode(zj @ maps[j]), yj)
        return out

    def edge_map(self, j: int) -> torch.Tensor:
        raise NotImplementedError("transported variants hold no whole edge map")

    def extra_state(self) -> dict[str, Any]:
        state = super().extra_state()
        state.update(
            out_maps={j: p.cpu() for j, p in self.out_maps.items()}, refreshes=self.refreshes
        )
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.out_maps = {int(j): p.to(self.agent.device) for j, p in state["out_maps"].items()}
        self.refreshes = int(state["refreshes"])


class HomogeneousSheafFRL(TransportedSheafFRL):
    """Algorithm 2: heads send raw pilots (``O = I``); only tails solve an SVD."""

    def initial_map(self, j: int) -> torch.Tensor:
        d = self.agent.graph.dims[self.agent.id]
        return torch.eye(d)

    def side_refits(self, head: bool, refresh: int) -> bool:
        return not head


class StrictSheafFRL(TransportedSheafFRL):
    """Algorithms 3/4: secret random masks, both ends refit, raw pilots stay home.

    ``self.secret`` (:func:`~fedsheaf.sheaf.secret.agent_secret`) seeds the first mask of
    every edge and the encoder's initial weights. Later maps are refits from what the
    agent receives and its own ``A_i``, so they hide ``A_i`` only as long as the first
    ones do: a neighbour that could rebuild one map of an edge could replay every refit
    after it (docs/privacy.md).
    """

    def __init__(self, agent: Agent, nbr: Exchange, reporter: Reporter) -> None:
        sc = agent.cfg.sheaf
        #: this agent's secret: never sent, kept only in its own checkpoint
        self.secret = agent_secret(sc.mask_secret, sc.mask_secret_dir, agent.id)
        self.initialise_model(agent)
        super().__init__(agent, nbr, reporter)

    @classmethod
    def check(cls, cfg: ExperimentConfig, data: AgentData) -> None:
        super().check(cfg, data)
        sc = cfg.sheaf
        if sc.mask_secret == "file" and sc.mask_secret_dir is not None:
            if not Path(sc.mask_secret_dir).is_dir():
                raise ConfigError(
                    f"sheaf.mask_secret_dir {sc.mask_secret_dir} is not a directory (it holds "
                    "each agent's key file agent-<i>.key)"
                )

    def initialise_model(self, agent: Agent) -> None:
        """Re-draw the model's initial weights from the secret instead of the run seed:
        weights a neighbour could rebuild would give it ``A_i`` of the first step, and
        the first message would then give away the mask (Procrustes)."""
        try:
            seeded_init_(agent.model.to("cpu"), secret_seed(self.secret, "model"))
        except TypeError as exc:  # (a plug-in model's layer of its own)
            raise ConfigError(
                f"sheaf.variant=strict draws agent {agent.id}'s initial weights from its "
                f"secret, but agents[{agent.id}].model {agent.cfg.agents[agent.id].model!r} "
                f"cannot be re-initialised: {exc}; give that module a reset_parameters() "
                "method, or use sheaf.variant=standard"
            ) from None
        agent.model.to(agent.device)

    def initial_map(self, j: int) -> torch.Tensor:
        d_i = self.agent.graph.dims[self.agent.id]
        return random_stiefel(self.stalk[j], d_i, secret_generator(self.secret, "mask", j))

    def side_refits(self, head: bool, refresh: int) -> bool:
        if self.cfg.sheaf.map_refresh == "step":
            return True
        return head == (refresh % 2 == 0)

    @torch.no_grad()
    def prepare_transport(self) -> None:
        if self.cfg.sheaf.map_refresh != "step":
            return  # window refits alternate: the two ends' maps already match
        self.model.eval()
        own = self.pilots.features(self.model.encode, self.agent.data.x_pilot, 0, 0)
        received = self.send_pilots(own).wait()
        self.eval_maps = dict(self.out_maps)
        for j, m in zip(self.nbr.neighbours, received, strict=True):
            if not self.is_head[j]:
                self.eval_maps[j] = stiefel_map(m, own)

    def extra_state(self) -> dict[str, Any]:
        state = super().extra_state()
        state["mask_secret"] = self.secret  # this agent's own checkpoint file only
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        if "mask_secret" in state:  # (checkpoints from before it have none)
            self.secret = bytes(state["mask_secret"])
