"""Backbone + linear head for head-only FedAvg: features ``H`` are the UFM's free features.

``UFMNet`` = private backbone (an MLP for tabular inputs or a small CNN for image
inputs) whose last layer is a plain linear *feature layer* to ``P`` features (no
activation, as in seed 002), then the shared head ``Linear(P, C)``. Alignment
rotates the feature layer and the head together.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from fedsheaf.models.seeded import build_seeded

__all__ = ["GEO_HIDDEN", "UFMNet", "build_ufm_net", "cnn_backbone", "mlp_backbone"]

#: Width of the fully connected layer between the CNN's convolutions and its feature layer.
GEO_HIDDEN = 128


def mlp_backbone(n_inputs: int, widths: Sequence[int]) -> nn.Sequential:
    """``Linear → ReLU`` for each width (the features' input)."""
    layers: list[nn.Module] = []
    prev = n_inputs
    for w in widths:
        layers += [nn.Linear(prev, w), nn.ReLU()]
        prev = w
    return nn.Sequential(*layers)


def cnn_backbone(in_channels: int, size: int, channels: Sequence[int]) -> nn.Sequential:
    """3×3 stride-2 convolutions with ReLU, flattened (no pooling: positions are targets),
    then ``Linear(·, GEO_HIDDEN) → ReLU``."""
    layers: list[nn.Module] = []
    prev, side = in_channels, size
    for c in channels:
        layers += [nn.Conv2d(prev, c, 3, stride=2, padding=1), nn.ReLU()]
        prev, side = c, (side + 1) // 2
    layers += [nn.Flatten(), nn.Linear(prev * side * side, GEO_HIDDEN), nn.ReLU()]
    return nn.Sequential(*layers)


class UFMNet(nn.Module):
    """``x → body → feature (Linear to P) → head (Linear P → C)``.

    The head is the shared part (``HEAD = "head"``); body and feature layer are private.
    """

    HEAD = "head"

    def __init__(self, body: nn.Module, body_width: int, n_features: int, n_targets: int) -> None:
        super().__init__()
        self.body = body
        self.feature = nn.Linear(body_width, n_features)
        self.head = nn.Linear(n_features, n_targets)

    def representation(self, x: Tensor) -> Tensor:
        """Features ``H`` (rows = samples), the input of the head."""
        return self.feature(self.body(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.representation(x))

    def head_names(self) -> list[str]:
        return ["head.weight", "head.bias"]

    def body_names(self) -> list[str]:
        head = set(self.head_names())
        return [n for n, _ in self.named_parameters() if n not in head]


def build_ufm_net(
    input_shape: Sequence[int],
    widths: Sequence[int],
    n_features: int,
    n_targets: int,
    *,
    seed: int,
) -> UFMNet:
    """An MLP (``input_shape = (D,)``) or CNN (``(C, S, S)``) UFMNet, a function of ``seed``."""

    def make() -> UFMNet:
        if len(input_shape) == 1:
            body: nn.Module = mlp_backbone(int(input_shape[0]), widths)
            width = widths[-1] if widths else int(input_shape[0])
        else:
            body = cnn_backbone(int(input_shape[0]), int(input_shape[-1]), widths)
            width = GEO_HIDDEN
        return UFMNet(body, width, n_features, n_targets)

    return build_seeded(make, seed)
