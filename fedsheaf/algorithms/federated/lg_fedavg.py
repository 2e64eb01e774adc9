"""LG-FedAvg (Liang et al.): the opposite split -- shared head, private body."""

from __future__ import annotations

from fedsheaf.algorithms.federated.fedavg import FedAvg
from fedsheaf.algorithms.federated.schedule import Phase


class LGFedAvg(FedAvg):
    """Only the head goes to the server; each client keeps its own body.

    After the last round every client trains its private part (the body) for
    ``finetune_epochs`` with the shared head frozen.
    """

    name = "lg_fedavg"
    shared = "head"

    def final_schedule(self) -> list[Phase]:
        return [Phase("body", self.fc.finetune_epochs)]
