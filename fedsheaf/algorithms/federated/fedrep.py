"""FedRep (Collins et al.): FedPer's split with the head solved first, then the body."""

from __future__ import annotations

from fedsheaf.algorithms.federated.fedper import FedPer
from fedsheaf.algorithms.federated.schedule import Phase


class FedRep(FedPer):
    """Head for τ = ``head_epochs`` with the body frozen, then the body for
    τ_φ = ``body_epochs`` with the head frozen; only the body is uploaded.
    """

    name = "fedrep"

    def local_schedule(self) -> list[Phase]:
        return [Phase("head", self.fc.head_epochs), Phase("body", self.fc.body_epochs)]
