"""The FedRep authors' CNN (SPEC §4), generalised in input channels and size.

conv5×5 C→64, ReLU, maxpool2, conv5×5 64→64, ReLU, maxpool2, FC flat→120→64→n_classes
(no BatchNorm). For CIFAR-10 (3×32×32) ``flat = 64·5·5 = 1600``. The head is the last
FC layer only (``fc3``); everything else is the shared body. Returns logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedsheaf.models.seeded import build_seeded

__all__ = ["FedRepCNN", "build_fedrep_cnn"]


def _after_conv_pool(size: int) -> int:
    return (size - 4) // 2  # conv 5×5 without padding, then maxpool 2


class FedRepCNN(nn.Module):
    """Batch ``(B, in_channels, H, W)`` → logits ``(B, n_classes)``."""

    HEAD = "fc3"

    def __init__(
        self, in_channels: int = 3, input_size: int | tuple[int, int] = 32, n_classes: int = 10
    ) -> None:
        super().__init__()
        h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
        fh, fw = _after_conv_pool(_after_conv_pool(h)), _after_conv_pool(_after_conv_pool(w))
        if fh < 1 or fw < 1:
            raise ValueError(f"input size {h}×{w} is too small for the FedRep CNN (min 16×16)")
        self.conv1 = nn.Conv2d(in_channels, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.flat_dim = 64 * fh * fw
        self.fc1 = nn.Linear(self.flat_dim, 120)
        self.fc2 = nn.Linear(120, 64)
        self.fc3 = nn.Linear(64, n_classes)

    def representation(self, x: Tensor) -> Tensor:
        """Body output ``(B, 64)``, the input of the head."""
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return torch.relu(self.fc2(torch.relu(self.fc1(x))))

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(self.representation(x))

    def head_names(self) -> list[str]:
        """Parameter names of the head (the last FC layer)."""
        return [n for n, _ in self.named_parameters() if n.split(".")[0] == self.HEAD]

    def body_names(self) -> list[str]:
        """Parameter names of the body (everything but the head)."""
        head = set(self.head_names())
        return [n for n, _ in self.named_parameters() if n not in head]


def build_fedrep_cnn(
    in_channels: int = 3,
    input_size: int | tuple[int, int] = 32,
    n_classes: int = 10,
    *,
    seed: int,
) -> FedRepCNN:
    """Build a :class:`FedRepCNN` (on CPU) whose weights depend only on ``seed``."""
    return build_seeded(lambda: FedRepCNN(in_channels, input_size, n_classes), seed)
