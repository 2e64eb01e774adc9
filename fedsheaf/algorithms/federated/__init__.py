"""Server-based algorithms (SPEC §4): FedAvg and its relatives, MPI-free.

Each algorithm is FedAvg plus an override of *what is shared* or *the local
schedule* (see :mod:`.base`); :mod:`.trainer` runs schedules, :mod:`.protocol`
holds the server's math (sampling, placement, averaging). Head-only FedAvg
(:mod:`.head_fedavg`) also brings its own task (:mod:`.task`): regression data,
the UFM objective and Gram tracking against the theory.
"""

from fedsheaf.algorithms.federated.fedavg import FedAvg
from fedsheaf.algorithms.federated.fedavg_ft import FedAvgFT
from fedsheaf.algorithms.federated.fedper import FedPer
from fedsheaf.algorithms.federated.fedrep import FedRep
from fedsheaf.algorithms.federated.head.algorithm import HeadFedAvg
from fedsheaf.algorithms.federated.lg_fedavg import LGFedAvg
from fedsheaf.algorithms.federated.local import Local
from fedsheaf.algorithms.federated.schedule import Phase

FEDERATED: dict[str, type[FedAvg]] = {
    cls.name: cls for cls in (FedAvg, FedAvgFT, FedRep, FedPer, LGFedAvg, Local, HeadFedAvg)
}

__all__ = [
    "FEDERATED",
    "FedAvg",
    "FedAvgFT",
    "FedPer",
    "FedRep",
    "HeadFedAvg",
    "LGFedAvg",
    "Local",
    "Phase",
]
