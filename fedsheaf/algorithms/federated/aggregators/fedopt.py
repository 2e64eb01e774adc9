"""Adaptive server optimisers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

Algorithm 2 of the paper: the server treats the change of the mean as a pseudo-gradient
and takes one adaptive step along it each round. With ``x_t`` the shared vector the
clients started from and ``x_i`` their uploads,

.. math::

    Δ_t = \\bar x - x_t,\\quad
    m_t = β_1 m_{t-1} + (1-β_1) Δ_t,\\quad
    x_{t+1} = x_t + η\\, m_t / (\\sqrt{v_t} + τ),

where ``\\bar x`` is the mean of the uploads (weighted by sample count when ``weighted``,
as FedAvg's) and ``v_t`` is each method's second moment (:meth:`ServerOptimizer.second`),
with ``m_{-1} = 0`` and ``v_{-1} = τ²`` (the paper asks ``v_{-1} ≥ τ²``). There is no bias
correction, as in the paper. All arithmetic is float64 and the moments are kept in
float64, so a resumed run continues bitwise.

Defaults: ``β_1 = 0.9`` and ``β_2 = 0.99`` (the paper's fixed values), ``τ = 10⁻³`` and
``η = 10⁻²`` (the paper tunes both per task; these are typical of its best values).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsheaf.algorithms.federated.aggregators.base import Aggregator
from fedsheaf.util.errors import CheckpointError


class ServerOptimizer(Aggregator):
    """The common step of FedAdagrad, FedAdam and FedYogi (see the module's docstring).

    Parameters
    ----------
    eta:
        Server learning rate η > 0.
    beta1:
        Momentum β_1 in [0, 1).
    beta2:
        Second-moment decay β_2 in [0, 1) (FedAdam, FedYogi).
    tau:
        Adaptivity τ > 0 (the degree of adaptivity; also ``v_{-1} = τ²``).
    weighted:
        Whether the mean of the uploads is weighted by sample count (default:
        ``federated.weighted``).
    """

    def __init__(
        self,
        eta: float = 1e-2,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        weighted: bool | None = None,
    ) -> None:
        super().__init__(weighted)
        for name, value in (("eta", eta), ("tau", tau)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not (isinstance(value, int | float) and 0 <= value < 1):
                raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
        self.eta, self.tau = float(eta), float(tau)
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.m: np.ndarray | None = None
        self.v: np.ndarray | None = None

    def second(self, v: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """``v_t`` from ``v_{t-1}`` and ``Δ_t`` (each method's own)."""
        raise NotImplementedError

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        x = np.asarray(global_params, dtype=np.float64)
        delta = self.mean(updates, counts) - x
        if self.m is None or self.v is None:
            self.m = np.zeros_like(x)
            self.v = np.full_like(x, self.tau**2)
        self.m = self.beta1 * self.m + (1.0 - self.beta1) * delta
        self.v = self.second(self.v, delta)
        return x + self.eta * self.m / (np.sqrt(self.v) + self.tau)

    def state_dict(self) -> dict[str, Any]:
        if self.m is None or self.v is None:
            return {}
        return {"m": self.m.copy(), "v": self.v.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not state:
            self.m = self.v = None
            return
        if set(state) != {"m", "v"}:
            raise CheckpointError(
                f"the checkpoint's {type(self).__name__} state holds {sorted(state)}, "
                "expected m and v"
            )
        self.m = np.asarray(state["m"], dtype=np.float64).copy()
        self.v = np.asarray(state["v"], dtype=np.float64).copy()
