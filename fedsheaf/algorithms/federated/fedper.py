"""FedPer (Arivazhagan et al.): shared body, private head, both trained together."""

from __future__ import annotations

from fedsheaf.algorithms.federated.fedavg import FedAvg
from fedsheaf.algorithms.federated.schedule import Phase


class FedPer(FedAvg):
    """Only the body goes to the server; each client keeps its own head.

    Local schedule as FedAvg (all parameters for ``local_epochs``); after the
    last round every client trains its head for ``finetune_epochs``.
    """

    name = "fedper"
    shared = "body"

    def final_schedule(self) -> list[Phase]:
        return [Phase("head", self.fc.finetune_epochs)]
