"""The Sheaf-FRL penalty ``R_i`` of one agent (SPEC §2).

``R_i = λ_i/(2K) · [ Σ_{j∈N(i)⁻} ‖A_i − V_ij A_j‖²_F + Σ_{j∈N(i)⁺} ‖A_j − V_ji A_i‖²_F ]``

Every residual lives in the edge head's (larger) space; it is never projected to the
smaller one. Neighbours' pilots and the maps are constants (detached).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "Neighbour",
    "agent_lambda",
    "penalty_gradient_closed_form",
    "sheaf_penalty",
    "transported_penalty",
]

#: ``(a_j, v, own_is_head)``: neighbour pilots (d_j × K), edge map (head × tail),
#: and whether the calling agent is the head of that edge.
Neighbour = tuple[Tensor, Tensor, bool]


def agent_lambda(lam: float, d_i: int) -> float:
    """Per-agent weight ``λ_i = λ / d_i``."""
    if d_i <= 0:
        raise ValueError(f"latent dim must be positive, got {d_i}")
    return lam / d_i


def _checked(a_own: Tensor, a_j: Tensor, v: Tensor, own_is_head: bool) -> None:
    if a_own.ndim != 2 or a_j.ndim != 2 or v.ndim != 2:
        raise ValueError("pilots and maps must be 2-D (d × K and head × tail)")
    if a_j.shape[1] != a_own.shape[1]:
        raise ValueError(f"pilot counts differ: own K={a_own.shape[1]}, neighbour K={a_j.shape[1]}")
    want = (a_own.shape[0], a_j.shape[0]) if own_is_head else (a_j.shape[0], a_own.shape[0])
    if tuple(v.shape) != want:
        raise ValueError(
            f"edge map has shape {tuple(v.shape)}, expected head×tail {want} "
            f"(own_is_head={own_is_head})"
        )


def sheaf_penalty(a_own: Tensor, neighbours: Sequence[Neighbour], lam_i: float) -> Tensor:
    """Penalty ``R_i`` for agent ``i``; differentiable w.r.t. ``a_own`` (d_i × K) only.

    For ``own_is_head`` the residual is ``a_own − V a_j`` (d_i × K); otherwise it is
    ``a_j − V a_own`` (d_j × K). With no neighbours the result is a zero scalar.
    """
    k = a_own.shape[1] if a_own.ndim == 2 else 0
    total = a_own.new_zeros(())
    for a_j, v, own_is_head in neighbours:
        _checked(a_own, a_j, v, own_is_head)
        a_j = a_j.detach().to(a_own.dtype)
        v = v.detach().to(a_own.dtype)
        residual = a_own - v @ a_j if own_is_head else a_j - v @ a_own
        total = total + residual.pow(2).sum()
    if k == 0:
        return total
    return total * (lam_i / (2 * k))


def transported_penalty(
    a_own: Tensor, maps: Sequence[Tensor], received: Sequence[Tensor], lam_i: float
) -> Tensor:
    """The transported variants' ``R_i = λ_i/(2K) Σ_j ‖P_ij A_i − m_{j→i}‖²_F``.

    ``maps[n]`` is this agent's ``P_ij`` (stalk × d_i) for its n-th neighbour and
    ``received[n]`` that neighbour's message ``P_ji A_j`` (stalk × K); both are constants.
    Differentiable w.r.t. ``a_own`` (d_i × K) only; no neighbours give a zero scalar.
    """
    if len(maps) != len(received):
        raise ValueError(f"{len(maps)} maps but {len(received)} received messages")
    total = a_own.new_zeros(())
    for p, m in zip(maps, received, strict=True):
        total = total + (p.detach() @ a_own - m.detach().to(a_own.dtype)).pow(2).sum()
    return total * (lam_i / (2 * a_own.shape[1]))


@torch.no_grad()
def penalty_gradient_closed_form(
    a_own: Tensor, neighbours: Sequence[Neighbour], lam_i: float
) -> Tensor:
    """SPEC closed form ``∂R_i/∂A_i = (λ_i/K) Σ_j (A_i − V̂_ij A_j)``.

    ``V̂ = V`` when ``i`` is the head and ``V̂ = Vᵀ`` when it is the tail. On the tail
    side the exact derivative is ``−(λ_i/K) Vᵀ(A_j − V A_i)``, which equals this form
    because ``VᵀV = I``; so the two agree only for maps on the Stiefel manifold.
    """
    k = a_own.shape[1]
    grad = torch.zeros_like(a_own)
    for a_j, v, own_is_head in neighbours:
        _checked(a_own, a_j, v, own_is_head)
        v = v.to(a_own.dtype)
        v_hat = v if own_is_head else v.T
        grad += a_own - v_hat @ a_j.to(a_own.dtype)
    return grad * (lam_i / k)
