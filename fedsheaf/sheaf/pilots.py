"""Shared pilot stream and pilot normalisation (SPEC §2, "Pilots", "Pilot selection").

Every rank builds the same :class:`PilotStream` from the run seed and asks it for
``indices(epoch, step)``; the answer depends only on ``(seed, epoch, step)`` (and the
pilot labels for ``stratified``), never on call order or on the rank, so all agents
encode the same K pilots at every step without communicating.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedsheaf.util.errors import ConfigError

__all__ = ["PILOT_STRATEGIES", "PilotStream", "parseval"]

PILOT_STRATEGIES = ("uniform", "stratified")

# Separates the pilot stream's random numbers from other consumers of the same run seed.
_STREAM_SALT = 0x9170


class PilotStream:
    """Deterministic stream of pilot batches (positions into the pilot pool).

    Parameters
    ----------
    seed:
        The stream's seed (derived from the run seed, without the agent id); equal
        seeds give equal streams on every rank.
    pool_size:
        Number of pilots in the shared pilot set.
    batch:
        Pilots per step, ``K``.
    strategy:
        ``"uniform"``: each epoch a fresh seeded permutation of the pool, consumed in
        consecutive blocks of ``K`` and cycled when it runs out. ``"stratified"``: the same
        per class, with ``K // C`` pilots of each of the ``C`` classes per batch and the
        ``K % C`` remaining slots rotated over the classes from step to step.
    labels:
        Pilot labels (length ``pool_size``), required for ``"stratified"``.
    """

    def __init__(
        self,
        seed: int,
        pool_size: int,
        batch: int,
        strategy: str = "uniform",
        labels: np.ndarray | None = None,
    ) -> None:
        if strategy not in PILOT_STRATEGIES:
            raise ConfigError(f"pilot strategy must be one of {PILOT_STRATEGIES}, got {strategy!r}")
        if pool_size <= 0:
            raise ConfigError(f"the pilot pool is empty (pool_size={pool_size})")
        if not 0 < batch <= pool_size:
            raise ConfigError(
                f"pilot batch must be in 1..{pool_size} (the pilot pool size), got {batch}"
            )
        self.seed = int(seed)
        self.pool_size = int(pool_size)
        self.batch = int(batch)
        self.strategy = strategy
        self._by_class: list[np.ndarray] = []
        if strategy == "stratified":
            self._by_class = self._class_positions(labels)

    def _class_positions(self, labels: np.ndarray | None) -> list[np.ndarray]:
        if labels is None:
            raise ConfigError("pilot strategy 'stratified' needs the pilot labels")
        labels = np.asarray(labels)
        if labels.shape != (self.pool_size,):
            raise ConfigError(
                f"pilot labels must have length {self.pool_size}, got shape {labels.shape}"
            )
        classes = np.unique(labels)
        per_class = [np.flatnonzero(labels == c) for c in classes]
        need = -(-self.batch // len(classes))  # ceil(K / C)
        short = [int(c) for c, pos in zip(classes, per_class, strict=True) if len(pos) < need]
        if short:
            raise ConfigError(
                f"stratified pilot batch {self.batch} needs {need} pilots per class, but "
                f"classes {short} have fewer"
            )
        return per_class

    def _permutation(self, epoch: int, n: int, stream: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, _STREAM_SALT, int(epoch), stream])
        return rng.permutation(n)

    @staticmethod
    def _cycle(perm: np.ndarray, start: int, count: int) -> np.ndarray:
        return perm[(start + np.arange(count)) % len(perm)]

    def indices(self, epoch: int, step: int) -> np.ndarray:
        """Positions (int64, length ``K``, no repeats) of the pilots for ``(epoch, step)``."""
        if epoch < 0 or step < 0:
            raise ValueError(f"epoch and step must be >= 0, got {epoch}, {step}")
        if self.strategy == "uniform":
            perm = self._permutation(epoch, self.pool_size, 0)
            return self._cycle(perm, step * self.batch, self.batch).astype(np.int64)
        n_cls = len(self._by_class)
        base, extra = divmod(self.batch, n_cls)
        # Extra slots go to classes (step·extra + t) mod C, t < extra; class c has had
        # ceil((step·extra − c)/C) of them before this step.
        first_extra = step * extra
        chosen = []
        for c, positions in enumerate(self._by_class):
            before = max(0, -(-(first_extra - c) // n_cls))
            gets_extra = (c - first_extra) % n_cls < extra
            count = base + int(gets_extra)
            perm = self._permutation(epoch, len(positions), c + 1)
            chosen.append(positions[self._cycle(perm, step * base + before, count)])
        return np.concatenate(chosen).astype(np.int64)


def parseval(a: Tensor, rel_tol: float = 1e-6) -> Tensor:
    """Parseval normalisation ``Ã = A (AᵀA)^{-1/2}`` of a ``d × K`` pilot matrix.

    Computed as the polar factor ``U Wᵀ`` of the thin SVD ``A = U S Wᵀ`` (the same
    matrix), keeping only singular values above ``rel_tol · s_max``; ``(AᵀA)^{-1/2}`` is
    then the pseudo-inverse square root, so ``K > d`` or repeated pilots do not blow up.
    ``ÃᵀÃ`` is the projector onto the row space of ``A`` (``I_K`` when rank is ``K``).
    A zero matrix is returned unchanged. Differentiable when singular values are distinct.
    """
    if a.ndim != 2:
        raise ValueError(f"parseval expects a 2-D d×K matrix, got shape {tuple(a.shape)}")
    u, s, wh = torch.linalg.svd(a, full_matrices=False)
    if s.numel() == 0 or s.max().item() == 0.0:
        return a.clone()
    keep = s > rel_tol * s.max().detach()
    return (u[:, keep]) @ wh[keep, :]
