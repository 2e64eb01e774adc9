"""A user's model module, as a researcher would write one outside fedsheaf: the tests
write it into a temporary directory and name its factories as ``usermodels:<name>`` with
that directory on PYTHONPATH (nothing installed)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

MODULE = "usermodels"

SOURCE = textwrap.dedent(
    '''
    import math

    import torch
    from torch import nn

    from fedsheaf.models.seeded import GeneratorDropout


    def _inputs(input_shape):
        return math.prod(input_shape)


    class MLP(nn.Module):
        """An agent model that is not a CNN: flatten, MLP encoder to d, MLP decoder."""

        def __init__(self, n_in, d, n_classes, hidden, dropout, out=None):
            super().__init__()
            self.enc = nn.Sequential(
                nn.Flatten(), nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, d)
            )
            self.dec = nn.Sequential(
                nn.ReLU(), GeneratorDropout(dropout), nn.Linear(d, out or n_classes)
            )

        def encode(self, x):
            return self.enc(x)

        def decode(self, z):
            return self.dec(z)


    def mlp(input_shape, n_classes, d=8, hidden=32, dropout=0.1):
        """Initialised the default way (torch's global generator: fedsheaf seeds it)."""
        return MLP(_inputs(input_shape), d, n_classes, hidden, dropout)


    def mlp_seeded(input_shape, n_classes, seed, d=8):
        """Takes fedsheaf's seed and initialises from a generator of its own."""
        model = MLP(_inputs(input_shape), d, n_classes, 16, 0.0)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        return model


    class DecodeOnly(nn.Module):
        def __init__(self, n_classes):
            super().__init__()
            self.out = nn.Linear(8, n_classes)

        def decode(self, z):
            return self.out(z)


    def no_encode(input_shape, n_classes):
        return DecodeOnly(n_classes)


    def wrong_logits(input_shape, n_classes, d=8):
        return MLP(_inputs(input_shape), d, n_classes, 16, 0.0, out=n_classes + 1)


    class TorchDropout(MLP):
        def __init__(self, n_in, d, n_classes):
            super().__init__(n_in, d, n_classes, 16, 0.0)
            self.dec = nn.Sequential(nn.Dropout(0.2), nn.Linear(d, n_classes))


    def torch_dropout(input_shape, n_classes, d=8):
        return TorchDropout(_inputs(input_shape), d, n_classes)


    class ServerMLP(nn.Module):
        """A server model with its head under another name than 'head'."""

        HEAD = "classifier"

        def __init__(self, n_in, n_classes, width):
            super().__init__()
            self.body = nn.Sequential(
                nn.Flatten(), nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, 32), nn.ReLU()
            )
            self.classifier = nn.Linear(32, n_classes)

        def representation(self, x):
            return self.body(x)

        def forward(self, x):
            return self.classifier(self.representation(x))


    def server_mlp(input_shape, n_classes, width=64):
        return ServerMLP(_inputs(input_shape), n_classes, width)


    class ServerDropout(ServerMLP):
        def __init__(self, n_in, n_classes):
            super().__init__(n_in, n_classes, 16)
            self.body.append(GeneratorDropout(0.5))


    def server_dropout(input_shape, n_classes):
        return ServerDropout(_inputs(input_shape), n_classes)


    class NoHead(ServerMLP):
        HEAD = "fc"


    def no_head(input_shape, n_classes):
        return NoHead(_inputs(input_shape), n_classes, 16)


    class Skewed(ServerMLP):
        def forward(self, x):
            return 2 * self.classifier(self.representation(x))


    def skewed(input_shape, n_classes):
        return Skewed(_inputs(input_shape), n_classes, 16)
    '''
)


def write_user_models(directory: Path) -> Path:
    """Write :data:`SOURCE` as ``directory/usermodels.py``; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{MODULE}.py").write_text(SOURCE)
    return directory


def pythonpath(directory: Path) -> str:
    """PYTHONPATH with ``directory`` first."""
    path = os.environ.get("PYTHONPATH")
    return f"{directory}{os.pathsep}{path}" if path else str(directory)
