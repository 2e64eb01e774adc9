"""Sheaf-FRL agent models (SPEC §3): CNN encoder with whitening, colouring MLP head."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from fedsheaf.models.seeded import GeneratorDropout, build_seeded, set_dropout_generator
from fedsheaf.models.whitening import Colouring, Whitening

__all__ = ["AgentModel", "CNNEncoder", "Head", "build_agent_model"]


class _ConvBlock(nn.Module):
    """conv3×3 (pad 1) → BatchNorm2d → ReLU → MaxPool2d(2), the pool skipped below 2×2."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        if min(x.shape[-2:]) >= 2:
            x = self.pool(x)
        return x


def _check_widths(name: str, widths: Sequence[int], allow_empty: bool) -> list[int]:
    widths = [int(w) for w in widths]
    if (not widths and not allow_empty) or any(w <= 0 for w in widths):
        raise ValueError(f"{name} must be positive integers, got {widths}")
    return widths


class CNNEncoder(nn.Module):
    """Images ``(B, C, H, W)`` → whitened latents ``(B, d)``, ``d = widths[-1]``."""

    def __init__(
        self, in_channels: int, widths: Sequence[int], whitening_mode: str = "standardize"
    ) -> None:
        super().__init__()
        widths = _check_widths("encoder widths", widths, allow_empty=False)
        chans = [int(in_channels), *widths]
        self.blocks = nn.Sequential(
            *(_ConvBlock(a, b) for a, b in zip(chans, widths, strict=False))
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.whitening = Whitening(widths[-1], mode=whitening_mode)
        self.latent_dim = widths[-1]

    def features(self, x: Tensor) -> Tensor:
        """Un-whitened latents ``(B, d)``."""
        return torch.flatten(self.pool(self.blocks(x)), 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.whitening(self.features(x))


class Head(nn.Module):
    """Colouring → [Linear → ReLU → Dropout]* → Linear(n_classes)."""

    def __init__(
        self, whitening: Whitening, widths: Sequence[int], n_classes: int, dropout: float
    ) -> None:
        super().__init__()
        widths = _check_widths("head widths", widths, allow_empty=True)
        self.colouring = Colouring(whitening)
        layers: list[nn.Module] = []
        d_in = whitening.d
        for w in widths:
            layers += [nn.Linear(d_in, w), nn.ReLU(), GeneratorDropout(dropout)]
            d_in = w
        layers.append(nn.Linear(d_in, int(n_classes)))
        self.mlp = nn.Sequential(*layers)

    def forward(self, z: Tensor) -> Tensor:
        return self.mlp(self.colouring(z))


class AgentModel(nn.Module):
    """One agent's model: ``encode`` (whitened latents), ``decode`` (head), ``forward``."""

    def __init__(self, encoder: CNNEncoder, head: Head) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.latent_dim = encoder.latent_dim

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def decode(self, z: Tensor) -> Tensor:
        return self.head(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(x))

    def set_dropout_generator(self, generator: torch.Generator | None) -> None:
        """Draw dropout masks from ``generator`` (None: none; training with dropout then raises)."""
        set_dropout_generator(self, generator)


def build_agent_model(
    in_channels: int,
    encoder_widths: Sequence[int],
    head_widths: Sequence[int],
    dropout: float,
    n_classes: int,
    whitening_mode: str = "standardize",
    *,
    seed: int,
) -> AgentModel:
    """Build an :class:`AgentModel` (on CPU) whose weights depend only on ``seed``."""

    def factory() -> AgentModel:
        encoder = CNNEncoder(in_channels, encoder_widths, whitening_mode)
        return AgentModel(encoder, Head(encoder.whitening, head_widths, n_classes, dropout))

    return build_seeded(factory, seed)
