"""Coordinate-wise median of the uploads (Yin et al., 2018): robust to outlying clients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsheaf.algorithms.federated.aggregators.base import Aggregator


class Median(Aggregator):
    """Each coordinate of the new vector is the median of the clients' values there (the
    mean of the two middle ones for an even count). Sample counts are not used."""

    def __init__(self) -> None:
        super().__init__(weighted=False)

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        return np.median(np.asarray(updates, dtype=np.float64), axis=0)
