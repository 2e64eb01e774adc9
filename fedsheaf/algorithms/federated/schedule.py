"""What the server-based loop needs to know of an algorithm: its local schedule.

:class:`Phase` is one step of a client's schedule; :class:`Algorithm` is the part of
an algorithm (:class:`~fedsheaf.algorithms.federated.fedavg.FedAvg` and its
subclasses) that the client loop, the task and the summary read. They depend on this
module, not on ``fedavg``, so that ``fedavg`` can build a task without a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

PARTS = ("all", "body", "head", "none")


@dataclass(frozen=True)
class Phase:
    """Train the parameters of ``part`` (all, body or head) for ``epochs`` epochs."""

    part: str
    epochs: int

    def __post_init__(self) -> None:
        if self.part not in PARTS[:3]:
            raise ValueError(f"phase part must be one of all, body, head; got {self.part!r}")
        if self.epochs < 0:
            raise ValueError(f"phase epochs must be >= 0, got {self.epochs}")


class Algorithm(Protocol):
    """A server-based algorithm as the loop sees it (see ``fedavg.FedAvg``)."""

    name: str
    shared: str
    score_after_final: bool

    def participation(self) -> float:
        """The fraction of clients the server samples for a round."""
        ...

    def local_schedule(self) -> list[Phase]:
        """What a selected client trains in a round, in order."""
        ...

    def final_schedule(self) -> list[Phase]:
        """What every client trains once after the last round (shared part frozen)."""
        ...

    @property
    def has_final_round(self) -> bool:
        """Whether :meth:`final_schedule` trains anything."""
        ...
