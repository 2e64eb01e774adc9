"""Shared parts of the centralized heterogeneous baselines (FedProto, FedMuscle).

These run as agents on a graph *plus* one server (``fedsheaf.launch.hub``). An agent
is a :class:`HubAgent`: the non-cooperative agent (post-hoc maps for communication
accuracy, SPEC §3) that also talks to the server through a :class:`Hub`. The server
side of each algorithm is a small class whose ``serve_epoch`` mirrors one epoch of the
agents' schedule call for call (the loop over epochs is the base's ``serve``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from fedsheaf.algorithms.base import Agent, Exchange, Reporter
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.config.sections import ExperimentConfig


class Hub(Protocol):
    """The star between agents and server (see ``fedsheaf.launch.hub.StarHub``)."""

    @property
    def n_agents(self) -> int: ...

    def upload(self, rows: np.ndarray, kind: str) -> None: ...

    def collect(self, shape: tuple[int, int], kind: str, dtype: Any = ...) -> np.ndarray: ...

    def broadcast(
        self, mat: np.ndarray | None, shape: tuple[int, int], kind: str
    ) -> np.ndarray: ...

    def take_bytes(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class HubContext:
    """What the server must know to follow the agents' schedule."""

    cfg: ExperimentConfig
    n_agents: int
    dim: int
    n_classes: int
    steps_per_epoch: int
    n_pilots: int


class HubAgent(NonCooperative):
    """A non-cooperative agent with a line to the server."""

    def __init__(
        self, agent: Agent, nbr: Exchange, reporter: Reporter, hub: Hub, ctx: HubContext
    ) -> None:
        super().__init__(agent, nbr, reporter)
        self.hub, self.ctx = hub, ctx

    def other_traffic(self) -> dict[str, int]:
        """The epoch's traffic with the server: sent up and received down."""
        moved = self.hub.take_bytes()
        return {
            "server_bytes_sent": sum(v for k, v in moved.items() if k.endswith("_sent")),
            "server_bytes_received": sum(v for k, v in moved.items() if k.endswith("_received")),
        }


class HubServer:
    """The server side: ``serve_epoch`` mirrors one epoch of the agents' hub calls.

    Subclasses with state across epochs (FedProto's prototypes) override
    :meth:`state_dict` and :meth:`load_state_dict` for checkpoints.
    """

    def __init__(self, ctx: HubContext, hub: Hub) -> None:
        self.ctx, self.hub = ctx, hub

    def serve(self, first_epoch: int = 0, after_epoch: Callable[[int], None] | None = None) -> None:
        """Epochs ``first_epoch + 1 ..``; ``after_epoch(n)`` runs after epoch ``n``."""
        for epoch in range(first_epoch, self.ctx.cfg.train.epochs):
            self.serve_epoch(epoch)
            if after_epoch is not None:
                after_epoch(epoch + 1)

    def serve_epoch(self, epoch: int) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
