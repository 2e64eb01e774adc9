"""Closed-form restriction maps: Stiefel/Procrustes fits, transport, pilot windows.

Conventions
-----------
* Pilot matrices are *column-major*: ``A_i`` is ``d_i × K``, one column per pilot.
* An edge map is always stored in *head × tail* shape: ``V ∈ St(d_head, d_tail)``,
  ``VᵀV = I``, embedding the tail's latent space into the head's.
* :func:`transport` takes *batch-first* latents ``(n, d)``, as models produce them.

For ``V ∈ St(a, b)`` we have ``‖X − V Y‖²_F = ‖X‖²_F + ‖Y‖²_F − 2 Tr(Vᵀ X Yᵀ)``, so the
best map depends on the data only through the cross-product ``M = X Yᵀ`` and is the
maximiser of ``Tr(Vᵀ M)``: with the thin SVD ``M = U Σ Wᵀ`` it is ``V = U Wᵀ`` (the
polar factor of ``M``; orthogonal Procrustes when the dimensions agree).

Maps are fitted without autograd (they are constants for the penalty) and in float64
internally; the result has the dtype and device of the input.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "PilotWindow",
    "canonical_embedding",
    "random_stiefel",
    "stiefel_map",
    "stiefel_map_from_cross",
    "transport",
    "window_batches",
]


def canonical_embedding(
    rows: int, cols: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
) -> Tensor:
    """Return ``E = [I_cols; 0] ∈ St(rows, cols)``, the fallback/tie-break map."""
    return torch.eye(rows, cols, dtype=dtype, device=device)


def _check_matrix(name: str, x: Tensor) -> None:
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(x.shape)}")


@torch.no_grad()
def stiefel_map_from_cross(m: Tensor, jitter: float = 1e-6) -> Tensor:
    """Maximiser of ``Tr(Vᵀ M)`` over ``St(d_h, d_t)`` for a cross-product ``M`` (d_h × d_t).

    Parameters
    ----------
    m:
        Cross-product ``A_head A_tailᵀ`` (or a sum of them over a pilot window).
    jitter:
        Relative tie-break: the SVD is taken of ``M + jitter·‖M‖_F·E`` with
        ``E = [I; 0]``. This makes the fit unique and a continuous function of ``M``
        even when ``M`` is rank-deficient (fewer than ``d_t`` informative pilots), so both
        endpoints of an edge reproduce the same map; directions with no information
        default to the canonical embedding. The bias on a well-conditioned fit is
        ``O(jitter · ‖M‖/σ_min(M))``. ``jitter=0`` gives the plain polar factor.

    Returns
    -------
    Tensor
        ``V`` of shape ``(d_h, d_t)`` with ``VᵀV = I``; always finite. ``M = 0`` gives ``E``.
    """
    _check_matrix("cross-product", m)
    d_h, d_t = m.shape
    if d_h < d_t:
        raise ValueError(f"cross-product must be head×tail with d_head >= d_tail, got {d_h}×{d_t}")
    if jitter < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter}")
    if not torch.isfinite(m).all():
        raise ValueError("cross-product contains NaN or Inf (diverged latents?)")
    out_dtype = m.dtype if m.is_floating_point() else torch.get_default_dtype()
    fallback = canonical_embedding(d_h, d_t, dtype=out_dtype, device=m.device)
    m64 = m.detach().to(torch.float64)
    scale = torch.linalg.matrix_norm(m64).item()
    if d_t == 0 or scale == 0.0:
        return fallback
    if jitter > 0:
        m64 = m64 + (jitter * scale) * canonical_embedding(
            d_h, d_t, dtype=torch.float64, device=m.device
        )
    u, _, wh = torch.linalg.svd(m64, full_matrices=False)
    v = u @ wh
    if not torch.isfinite(v).all():  # never seen, but a NaN map must never leave here
        return fallback
    return v.to(out_dtype)


def stiefel_map(a_head: Tensor, a_tail: Tensor, jitter: float = 1e-6) -> Tensor:
    """Edge map ``V = argmin_{V ∈ St(d_h, d_t)} ‖a_head − V a_tail‖_F``.

    ``a_head`` is ``d_h × K`` and ``a_tail`` is ``d_t × K`` (same pilots, same column
    order), ``d_h ≥ d_t``. See :func:`stiefel_map_from_cross` for ``jitter``.
    """
    _check_matrix("a_head", a_head)
    _check_matrix("a_tail", a_tail)
    if a_head.shape[1] != a_tail.shape[1]:
        raise ValueError(
            f"a_head and a_tail must hold the same pilots: {a_head.shape[1]} vs "
            f"{a_tail.shape[1]} columns"
        )
    with torch.no_grad():
        cross = a_head.detach().to(torch.float64) @ a_tail.detach().to(torch.float64).T
    return stiefel_map_from_cross(cross, jitter).to(a_head.dtype)


def transport(z: Tensor, v: Tensor, receiver_is_head: bool) -> Tensor:
    """Carry a neighbour's batch-first latents ``z`` (n × d_sender) into the receiver's space.

    ``v`` is the edge map in head × tail shape. A head receiver applies ``V z`` per
    sample (``z Vᵀ`` batch-first; n × d_tail → n × d_head); a tail receiver applies
    ``Vᵀ z`` (``z V``; n × d_head → n × d_tail). For column-major pilots ``A`` (d × K)
    use ``transport(A.T, v, ...).T``.
    """
    _check_matrix("edge map", v)
    if z.ndim != 2:
        raise ValueError(f"latents must be batch-first (n, d), got shape {tuple(z.shape)}")
    d_head, d_tail = v.shape
    expected = d_tail if receiver_is_head else d_head
    if z.shape[1] != expected:
        side = "head" if receiver_is_head else "tail"
        raise ValueError(
            f"{side} receiver expects neighbour latents of dim {expected}, got {z.shape[1]}"
        )
    v = v.to(dtype=z.dtype, device=z.device)
    return z @ v.T if receiver_is_head else z @ v


def random_stiefel(
    rows: int,
    cols: int,
    generator: torch.Generator,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Haar-distributed element of ``St(rows, cols)`` (QR of a Gaussian, sign-fixed)."""
    if rows < cols:
        raise ValueError(f"St(rows, cols) needs rows >= cols, got {rows} < {cols}")
    g = torch.randn(rows, cols, generator=generator, dtype=torch.float64, device=device)
    q, r = torch.linalg.qr(g)
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1.0
    return (q * signs).to(dtype)


class PilotWindow:
    """Per-neighbour cross-products ``Σ_t A_head^(t) A_tail^(t)ᵀ`` over a window of batches.

    Fitting on the window means fitting on the column-wise concatenation of every
    pilot batch in it: ``[A^(1) … A^(T)] [B^(1) … B^(T)]ᵀ = Σ_t A^(t) B^(t)ᵀ``, and the
    Stiefel fit depends on the data only through that cross-product (see the module
    docstring). So an unlimited window (every batch since the last :meth:`reset`) costs
    ``O(d_head · d_tail)`` memory per neighbour however many steps it spans, and gives
    exactly the concatenated fit; a window of the last ``batches`` batches keeps each of
    them (a sliding window) and sums them, oldest first, when fitted.

    Accumulation is detached and in float64. ``map_refresh: step`` (Algorithm 1 literally)
    is ``add`` → ``fit`` → ``reset`` every step; the default refreshes once per epoch.
    """

    def __init__(self, jitter: float = 1e-6, batches: int | None = None) -> None:
        if batches is not None and batches < 1:
            raise ValueError(f"a window holds at least one batch, got {batches}")
        self.jitter = jitter
        self.batches = batches
        self._cross: dict[Hashable, Tensor] = {}
        self._count: dict[Hashable, int] = {}
        self._recent: dict[Hashable, deque[tuple[Tensor, int]]] = {}

    def add(self, neighbour: Hashable, a_head: Tensor, a_tail: Tensor) -> None:
        """Add one pilot batch of the edge with ``neighbour`` (head × K, tail × K)."""
        _check_matrix("a_head", a_head)
        _check_matrix("a_tail", a_tail)
        if a_head.shape[1] != a_tail.shape[1]:
            raise ValueError(f"pilot batches disagree on K: {a_head.shape[1]} vs {a_tail.shape[1]}")
        if a_head.shape[0] < a_tail.shape[0]:
            raise ValueError(
                f"add(neighbour, a_head, a_tail) wants the head first: got dims "
                f"{a_head.shape[0]} < {a_tail.shape[0]}"
            )
        with torch.no_grad():
            cross = a_head.detach().to(torch.float64) @ a_tail.detach().to(torch.float64).T
        recent = self._recent.get(neighbour)
        prev = self._cross.get(neighbour) if recent is None else recent[-1][0]
        if prev is not None and prev.shape != cross.shape:
            raise ValueError(
                f"neighbour {neighbour!r}: cross-product shape changed from "
                f"{tuple(prev.shape)} to {tuple(cross.shape)}"
            )
        if self.batches is None:
            self._cross[neighbour] = cross if prev is None else prev + cross
            self._count[neighbour] = self._count.get(neighbour, 0) + a_head.shape[1]
            return
        # a sliding window keeps its batches; their sum is taken when it is fitted
        self._recent.setdefault(neighbour, deque(maxlen=self.batches)).append(
            (cross, a_head.shape[1])
        )

    def samples(self, neighbour: Hashable) -> int:
        """Number of pilots in ``neighbour``'s window."""
        if self.batches is not None:
            return sum(n for _, n in self._recent.get(neighbour, ()))
        return self._count.get(neighbour, 0)

    def cross(self, neighbour: Hashable) -> Tensor:
        """The window's float64 cross-product (head × tail) for ``neighbour``."""
        if neighbour not in (self._cross if self.batches is None else self._recent):
            raise KeyError(f"no pilot batches accumulated for neighbour {neighbour!r}")
        if self.batches is not None:
            return _sum_oldest_first([c for c, _ in self._recent[neighbour]])
        return self._cross[neighbour]

    def fit(self, neighbour: Hashable, dtype: torch.dtype | None = None) -> Tensor:
        """Edge map (head × tail) fitted on the whole window of ``neighbour``."""
        v = stiefel_map_from_cross(self.cross(neighbour), self.jitter)
        return v if dtype is None else v.to(dtype)

    def reset(self) -> None:
        """Start a new window (drops every neighbour's batches)."""
        self._cross.clear()
        self._count.clear()
        self._recent.clear()

    def state(self) -> dict[Hashable, Any]:
        """Per neighbour: ``(cross, samples)`` (unlimited window) or the list of its
        batches' ``(cross, samples)``, oldest first (sliding window)."""
        if self.batches is None:
            return {j: (self._cross[j], self._count[j]) for j in self._cross}
        return {j: list(recent) for j, recent in self._recent.items()}

    def load_state(self, state: dict[Hashable, Any]) -> None:
        """Replace the window by one returned from :meth:`state` (checkpoint restore)."""
        self.reset()
        for j, value in state.items():
            if self.batches is None:
                cross, count = value
                self._cross[j] = cross.to(torch.float64)
                self._count[j] = int(count)
                continue
            self._recent[j] = deque(((c.to(torch.float64), int(n)) for c, n in value), self.batches)


def _sum_oldest_first(crosses: list[Tensor]) -> Tensor:
    """Σ of the window's cross-products in a fixed order (both ends of an edge agree)."""
    total = crosses[0].clone()
    for c in crosses[1:]:
        total += c
    return total


def window_batches(window: int | None, columns: int) -> int | None:
    """How many pilot batches of ``columns`` pilots make a window of ``window`` samples
    (rounded up; None: unlimited)."""
    return None if window is None else -(-window // columns)
