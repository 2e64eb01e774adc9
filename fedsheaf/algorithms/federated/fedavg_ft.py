"""FedAvg+FT: FedAvg, then every client fine-tunes its head for ``finetune_epochs``."""

from __future__ import annotations

from fedsheaf.algorithms.federated.fedavg import FedAvg
from fedsheaf.algorithms.federated.schedule import Phase


class FedAvgFT(FedAvg):
    """FedAvg whose final round fine-tunes each client's head (body frozen).

    Its score is the accuracy after that round: the rounds before it are FedAvg's.
    """

    name = "fedavg_ft"
    score_after_final = True

    def final_schedule(self) -> list[Phase]:
        return [Phase("head", self.fc.finetune_epochs)]
