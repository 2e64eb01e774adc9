"""A named subset of a model's parameters as one contiguous float32 vector.

This is what travels between clients and server: the runtime moves the vector
as a raw buffer, the algorithm only names the parameters it contains.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn


class ParamSet:
    """Parameters ``names`` of a model, in the model's own parameter order.

    Parameters
    ----------
    model:
        Any module; only its parameter names and shapes are recorded.
    names:
        The subset (any order; unknown names raise ``KeyError``).
    """

    def __init__(self, model: nn.Module, names: Iterable[str]) -> None:
        params = dict(model.named_parameters())
        wanted = set(names)
        unknown = sorted(wanted - set(params))
        if unknown:
            raise KeyError(f"model has no parameters named {unknown}")
        self.names = [n for n in params if n in wanted]
        self.shapes = [tuple(params[n].shape) for n in self.names]
        self.sizes = [params[n].numel() for n in self.names]
        self.size = int(sum(self.sizes))

    @property
    def nbytes(self) -> int:
        return 4 * self.size

    def flatten(self, model: nn.Module) -> np.ndarray:
        """The parameters' current values as a new contiguous float32 vector."""
        if not self.names:
            return np.zeros(0, dtype=np.float32)
        params = dict(model.named_parameters())
        flat = torch.cat([params[n].detach().reshape(-1) for n in self.names])
        return np.ascontiguousarray(flat.to("cpu", torch.float32).numpy())

    @torch.no_grad()
    def load(self, model: nn.Module, vec: np.ndarray) -> None:
        """Copy ``vec`` (as produced by :meth:`flatten`) into the model's parameters."""
        if vec.shape != (self.size,):
            raise ValueError(f"expected a vector of {self.size} values, got shape {vec.shape}")
        params = dict(model.named_parameters())
        src = torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
        offset = 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            p = params[name]
            p.copy_(src[offset : offset + size].view(shape).to(p.device, p.dtype))
            offset += size
