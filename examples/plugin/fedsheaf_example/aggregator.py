"""An aggregator plug-in: a norm-bounded mean of the clients' updates (no state).

Each round the server calls ``aggregate(global_params, updates, counts, round_)`` with
the flat float32 vector the clients started from, each sampled client's uploaded vector
and its training-sample count, and broadcasts the vector it returns (same size).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ClippedMean"]


class ClippedMean:
    """Average the clients' updates ``u_c - w``, each clipped to norm at most ``clip``,
    and move the shared vector by ``server_lr`` times that average::

        w' = w + server_lr * Σ_c a_c · min(1, clip / ‖u_c − w‖) (u_c − w)

    with ``a_c`` the sample-count weights (``weighted=True``) or ``1/|S|``. One client's
    large update then cannot move the shared model further than ``server_lr * clip``.
    """

    def __init__(self, clip: float = 1.0, server_lr: float = 1.0, weighted: bool = True) -> None:
        if clip <= 0 or server_lr <= 0:
            raise ValueError(f"clip and server_lr must be > 0, got {clip} and {server_lr}")
        self.clip, self.server_lr, self.weighted = clip, server_lr, weighted

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        w = global_params.astype(np.float64)
        deltas = np.stack([u.astype(np.float64) - w for u in updates])
        norms = np.linalg.norm(deltas, axis=1)
        deltas *= np.minimum(1.0, self.clip / np.maximum(norms, 1e-12))[:, None]
        weights = np.asarray(counts, dtype=np.float64) if self.weighted else np.ones(len(updates))
        step = weights @ deltas / weights.sum()
        return (w + self.server_lr * step).astype(np.float32)
