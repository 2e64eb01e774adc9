"""Coordinate-wise trimmed mean of the uploads (Yin et al., 2018)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedsheaf.algorithms.federated.aggregators.base import Aggregator


class TrimmedMean(Aggregator):
    """Per coordinate, drop the ``⌊β K⌋`` smallest and the ``⌊β K⌋`` largest of the K
    clients' values and average the rest (unweighted; β = 0 is the plain mean).

    Parameters
    ----------
    beta:
        The fraction trimmed from each end, in [0, 0.5) (so that a value always remains).
    """

    def __init__(self, beta: float = 0.1) -> None:
        super().__init__(weighted=False)
        if not (isinstance(beta, int | float) and 0 <= beta < 0.5):
            raise ValueError(f"beta must be a number in [0, 0.5), got {beta!r}")
        self.beta = float(beta)

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        u = np.sort(np.asarray(updates, dtype=np.float64), axis=0)
        cut = math.floor(self.beta * u.shape[0] + 1e-9)
        return u[cut : u.shape[0] - cut].mean(axis=0)
