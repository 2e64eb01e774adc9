"""FedYogi (Reddi et al., 2021): ``v_t = v_{t-1} − (1 − β_2) Δ_t² sign(v_{t-1} − Δ_t²)``."""

from __future__ import annotations

import numpy as np

from fedsheaf.algorithms.federated.aggregators.fedopt import ServerOptimizer


class FedYogi(ServerOptimizer):
    """Yogi on the server's pseudo-gradient (:mod:`.fedopt`): ``v`` moves towards ``Δ²``
    by an additive step, so it grows no faster than Adam's and shrinks more slowly."""

    def second(self, v: np.ndarray, delta: np.ndarray) -> np.ndarray:
        d2 = delta * delta
        return v - (1.0 - self.beta2) * d2 * np.sign(v - d2)
