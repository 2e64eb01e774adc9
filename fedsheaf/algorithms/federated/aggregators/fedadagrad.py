"""FedAdagrad (Reddi et al., 2021): ``v_t = v_{t-1} + Δ_t²``."""

from __future__ import annotations

import numpy as np

from fedsheaf.algorithms.federated.aggregators.fedopt import ServerOptimizer


class FedAdagrad(ServerOptimizer):
    """Adagrad on the server's pseudo-gradient (:mod:`.fedopt`).

    ``beta1`` defaults to 0 here (no momentum, as the paper analyses FedAdagrad); ``beta2``
    is not used.
    """

    def __init__(
        self,
        eta: float = 1e-2,
        beta1: float = 0.0,
        tau: float = 1e-3,
        weighted: bool | None = None,
    ) -> None:
        super().__init__(eta=eta, beta1=beta1, beta2=0.0, tau=tau, weighted=weighted)

    def second(self, v: np.ndarray, delta: np.ndarray) -> np.ndarray:
        return v + delta * delta
