"""Model plug-ins: an MLP agent model (decentralized runs) and an MLP server model
(server-based runs). Both take any input shape and flatten it, so they work on the
tabular vectors of :mod:`fedsheaf_example.data` and on images alike.

fedsheaf calls a model factory as ``factory(input_shape, n_classes, **model_args)``
(``input_shape`` without the batch axis: ``(F,)`` for vectors, ``(C, H, W)`` for images).
The factories here take no ``seed``: fedsheaf then seeds torch's generator from the run
seed around the call (and restores it after), so torch's default initialisation is
reproducible and every agent's model differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from fedsheaf import GeneratorDropout

__all__ = ["AgentMLP", "ServerMLP", "build_agent_mlp", "build_server_mlp"]


class AgentMLP(nn.Module):
    """A Sheaf-FRL agent: ``encode`` inputs to standardised latents ``(B, d)``, ``decode``
    latents to logits ``(B, n_classes)``.

    The latent is the encoder's output standardised per feature (``BatchNorm1d`` without
    affine parameters: batch statistics in training, running ones in evaluation), as the
    built-in CNN whitens its latent, so that the sheaf maps compare latents of a common
    scale. Dropout is fedsheaf's :class:`~fedsheaf.GeneratorDropout`: its masks come
    from a generator fedsheaf derives from the run seed (``torch.nn.Dropout`` would draw
    from torch's global one, and is refused).
    """

    def __init__(self, n_in: int, n_classes: int, d: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.standardise = nn.BatchNorm1d(d, affine=False)
        self.head = nn.Sequential(
            nn.Linear(d, hidden), nn.ReLU(), GeneratorDropout(dropout), nn.Linear(hidden, n_classes)
        )

    def encode(self, x: Tensor) -> Tensor:
        """Inputs ``(B, *input_shape)`` → latents ``(B, d)`` (what Sheaf-FRL maps)."""
        return self.standardise(self.encoder(x.flatten(1)))

    def decode(self, z: Tensor) -> Tensor:
        """Latents ``(B, d)`` (own or a neighbour's, transported) → logits."""
        return self.head(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(self.encode(x))


def build_agent_mlp(
    input_shape: Sequence[int],
    n_classes: int,
    *,
    d: int = 16,
    hidden: int = 64,
    dropout: float = 0.0,
) -> AgentMLP:
    """``agents[i].model: example_mlp``; ``agents[i].model_args``: ``d`` (the latent size:
    it must equal the graph file's ``dim`` of node i), ``hidden``, ``dropout``."""
    if d < 1 or hidden < 1:
        raise ValueError(f"d and hidden must be >= 1, got d={d}, hidden={hidden}")
    return AgentMLP(math.prod(input_shape), n_classes, d, hidden, dropout)


class ServerMLP(nn.Module):
    """A server-based model: a shared body (``representation``) and a local head.

    ``HEAD`` names the head submodule: FedRep/FedPer average every other parameter (the
    body) and keep the head on each client; LG-FedAvg the other way round.
    """

    HEAD = "head"

    def __init__(self, n_in: int, n_classes: int, hidden: Sequence[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(n_in, width), nn.ReLU()]
            n_in = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(n_in, n_classes)

    def representation(self, x: Tensor) -> Tensor:
        """Inputs → the body's output ``(B, r)``, the head's input."""
        return self.body(x.flatten(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.representation(x))


def build_server_mlp(
    input_shape: Sequence[int], n_classes: int, *, hidden: Sequence[int] = (64, 32)
) -> ServerMLP:
    """``federated.model: example_server_mlp``; ``federated.model_args``: ``hidden``
    (the body's widths; the last is the representation size r)."""
    if not hidden or any(int(w) < 1 for w in hidden):
        raise ValueError(f"hidden must be positive widths, got {list(hidden)}")
    return ServerMLP(math.prod(input_shape), n_classes, [int(w) for w in hidden])
