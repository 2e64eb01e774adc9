"""FedAdam (Reddi et al., 2021): ``v_t = β_2 v_{t-1} + (1 − β_2) Δ_t²``."""

from __future__ import annotations

import numpy as np

from fedsheaf.algorithms.federated.aggregators.fedopt import ServerOptimizer


class FedAdam(ServerOptimizer):
    """Adam on the server's pseudo-gradient (:mod:`.fedopt`), without bias correction."""

    def second(self, v: np.ndarray, delta: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1.0 - self.beta2) * (delta * delta)
