"""FedAvg, and the two things every server-based algorithm here is made of.

An algorithm is two pieces of data (SPEC §4):

* ``shared`` -- which part of the model goes to the server and is averaged
  there: ``"all"``, ``"body"``, ``"head"`` or ``"none"``. Everything else is
  private and stays on the client between rounds.
* the local schedule -- a list of :class:`Phase` s, each training one part of
  the model for some epochs with the rest frozen; plus an optional *final*
  schedule that every client runs once after the last round (head
  fine-tuning), with the shared parameters frozen and nothing uploaded.

The loop that runs a schedule (:mod:`.trainer`) and the server (which only
samples, averages a flat vector and broadcasts it back) know nothing about the
algorithm. A new algorithm is a subclass overriding one or two of these.

Optimiser state and frozen parameters: every phase builds a *fresh* optimiser
(``train.optimizer``: SGD or Nesterov with ``train.momentum``, or Adam; with
``train.weight_decay``)
over exactly the parameters that phase trains. Frozen parameters have
``requires_grad=False`` and are not in that optimiser, so they get neither
weight decay nor momentum; momentum buffers never carry over from one phase,
round or client to the next.
"""

from __future__ import annotations

from fedsheaf.algorithms.federated.schedule import Phase
from fedsheaf.algorithms.federated.task import Task
from fedsheaf.config.sections import ExperimentConfig, FederatedConfig


class FedAvg:
    """McMahan et al.'s FedAvg: the whole model is shared and trained together.

    Each selected client trains all parameters for ``local_epochs`` epochs from
    the broadcast model; the server averages the uploads. No final round.
    """

    name = "fedavg"
    shared = "all"
    #: Report the accuracy after the final round as the score (FedAvg+FT), instead
    #: of the mean over the last ``eval_last`` rounds.
    score_after_final = False

    def __init__(self, fc: FederatedConfig) -> None:
        self.fc = fc

    def participation(self) -> float:
        """The fraction of clients the server samples for a round (``federated.fraction``)."""
        return self.fc.fraction

    def local_schedule(self) -> list[Phase]:
        """What a selected client trains in a round, in order."""
        return [Phase("all", self.fc.local_epochs)]

    def final_schedule(self) -> list[Phase]:
        """What every client trains once after the last round (shared part frozen)."""
        return []

    def make_task(self, cfg: ExperimentConfig) -> Task:
        """Data, model, local solver and evaluation (default: SPEC §4 classification)."""
        return Task(cfg, self)

    @property
    def has_final_round(self) -> bool:
        return any(p.epochs > 0 for p in self.final_schedule())

    def describe(self) -> str:
        """One line: what is shared, the local schedule and the final round."""

        def fmt(phases: list[Phase]) -> str:
            return " then ".join(f"{p.part} x{p.epochs}" for p in phases if p.epochs) or "-"

        return (
            f"shares {self.shared}; local: {fmt(self.local_schedule())}; "
            f"final round: {fmt(self.final_schedule())}"
        )
