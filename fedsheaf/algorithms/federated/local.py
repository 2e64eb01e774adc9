"""Local: every client trains its own model; nothing is shared."""

from __future__ import annotations

from fedsheaf.algorithms.federated.fedavg import FedAvg


class Local(FedAvg):
    """FedAvg's schedule with nothing uploaded, run by every client in every round.

    With nothing to average there is no server to sample for: each client trains
    ``local_epochs`` epochs per round, ``rounds * local_epochs`` in all, as the FedRep
    authors' Local baseline trains every client for all the epochs.
    """

    name = "local"
    shared = "none"

    def participation(self) -> float:
        return 1.0
