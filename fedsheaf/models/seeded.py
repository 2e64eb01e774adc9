"""Seeded model construction that never touches torch's global RNG.

Layers' constructors initialise themselves from the global generator; we build under
``torch.random.fork_rng`` (which saves and restores the CPU generator, no reseeding)
and then re-initialise every parameter from an explicit ``torch.Generator`` with the
same distributions torch uses by default, so a model is a pure function of its seed.
Dropout draws at training time can likewise use an explicit generator
(:class:`GeneratorDropout`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor, nn

from fedsheaf.util.errors import CheckpointError

__all__ = ["GeneratorDropout", "build_seeded", "seeded_init_", "set_dropout_generator"]

M = TypeVar("M", bound=nn.Module)


def _default_linear_init(layer: nn.Conv2d | nn.Linear, g: torch.Generator) -> None:
    # torch's reset_parameters: kaiming_uniform(a=√5) weights, U(±1/√fan_in) biases.
    nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=g)
    if layer.bias is not None:
        fan_in = layer.weight[0].numel()
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(layer.bias, -bound, bound, generator=g)


@torch.no_grad()
def seeded_init_(model: nn.Module, seed: int) -> nn.Module:
    """Re-initialise ``model``'s parameters in place from ``Generator().manual_seed(seed)``.

    Supports Conv/Linear layers (torch's default distributions) and BatchNorm (weight 1,
    bias 0, fresh running statistics); any other module with parameters of its own is
    reset by its ``reset_parameters()`` with torch's CPU generator forked and seeded from
    ``seed`` (a plug-in model's LayerNorm, Embedding, ...); one without that method is an
    error, so a new layer type cannot silently keep global-RNG weights.
    """
    g = torch.Generator().manual_seed(int(seed))
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            _default_linear_init(module, g)
        elif isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_parameters()
        elif any(True for _ in module.parameters(recurse=False)):
            reset = getattr(module, "reset_parameters", None)
            if not callable(reset):
                raise TypeError(
                    f"seeded_init_ does not know how to initialise {name or 'the model'!r} "
                    f"({type(module).__name__}: parameters of its own, no reset_parameters())"
                )
            with torch.random.fork_rng(devices=[]):
                torch.random.default_generator.manual_seed(
                    int(torch.randint(2**62, (1,), generator=g))
                )
                reset()
    return model


def build_seeded(factory: Callable[[], M], seed: int) -> M:
    """Call ``factory()`` without disturbing the global CPU RNG, then :func:`seeded_init_`."""
    with torch.random.fork_rng(devices=[]):
        model = factory()
    seeded_init_(model, seed)
    return model


class GeneratorDropout(nn.Module):
    """Inverted dropout whose masks come from ``self.generator``.

    Training with ``p > 0`` needs a generator (:func:`set_dropout_generator`): masks from
    torch's global RNG would not derive from the run seed. The generator must live on
    the same device as the inputs.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.generator: torch.Generator | None = None

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.generator is None:
            raise RuntimeError(
                "GeneratorDropout in training without a generator: give the model one "
                "derived from the run seed (set_dropout_generator)"
            )
        keep = 1.0 - self.p
        mask = torch.empty_like(x).bernoulli_(keep, generator=self.generator)
        return x * mask / keep


def set_dropout_generator(model: nn.Module, generator: torch.Generator | None) -> None:
    """Point every :class:`GeneratorDropout` in ``model`` at ``generator``."""
    for module in model.modules():
        if isinstance(module, GeneratorDropout):
            module.generator = generator


# ---- random state ------------------------------------------------------------
def _dropout_generators(model: torch.nn.Module) -> list[torch.Generator]:
    seen: list[torch.Generator] = []
    for module in model.modules():
        g = getattr(module, "generator", None) if isinstance(module, GeneratorDropout) else None
        if g is not None and not any(g is s for s in seen):
            seen.append(g)
    return seen


def rng_state(model: torch.nn.Module) -> list[torch.Tensor]:
    """States of the explicit generators ``model`` draws from (its dropout masks)."""
    return [g.get_state() for g in _dropout_generators(model)]


def set_rng_state(model: torch.nn.Module, states: list[torch.Tensor]) -> None:
    """Restore what :func:`rng_state` returned."""
    gens = _dropout_generators(model)
    if len(gens) != len(states):
        raise CheckpointError(
            f"checkpoint holds {len(states)} dropout generator states, the model has {len(gens)}"
        )
    for g, s in zip(gens, states, strict=True):
        expected = g.get_state().numel()
        if s.numel() != expected:  # a CPU generator's state is not a CUDA one's (16 bytes)
            raise CheckpointError(
                f"the checkpoint's dropout generator state ({s.numel()} bytes) does not fit "
                f"this rank's {g.device.type} generator ({expected} bytes): it was written on "
                "another device type; resume on the device type the run started on "
                "(train.device)"
            )
        g.set_state(s)


class ForwardState:
    """What a training-mode forward pass of ``model`` changes, saved so that the pass can
    be repeated exactly: every buffer (BatchNorm's running statistics and count) and the
    state of its dropout generators. :meth:`restore` puts them back."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.buffers = [b.detach().clone() for b in model.buffers()]
        self.rng = rng_state(model)

    @torch.no_grad()
    def restore(self) -> None:
        for buf, saved in zip(self.model.buffers(), self.buffers, strict=True):
            buf.copy_(saved)
        set_rng_state(self.model, self.rng)
