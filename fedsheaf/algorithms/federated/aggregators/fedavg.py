"""FedAvg's server step (McMahan et al., 2017): the mean of the uploads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsheaf.algorithms.federated.aggregators.base import Aggregator
from fedsheaf.algorithms.federated.protocol import average


class FedAvgAggregator(Aggregator):
    """``w ← Σ_k p_k w_k`` with ``p_k = n_k / Σ n`` (``weighted``) or ``1/K``.

    The default aggregator: the same float64 sum in client order as fedsheaf has always
    averaged (:func:`~fedsheaf.algorithms.federated.protocol.average`), so runs keep
    their numbers bit for bit. ``weighted`` defaults to ``federated.weighted``.
    """

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        return average(np.asarray(updates), np.asarray(counts) if self.weighted else None)
