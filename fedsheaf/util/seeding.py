"""Seeds derived from the run seed: one independent stream per purpose and agent.

Nothing in fedsheaf reseeds a global RNG; every random choice builds its own
generator from a seed that :func:`derive_seed` produced (a module may salt it further,
e.g. with the epoch).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def derive_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed that depends only on ``seed`` and the ``keys`` (e.g. purpose, agent id)."""
    words = [int(seed)] + [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) for k in keys]
    return int(
        np.random.SeedSequence(words).generate_state(2, dtype=np.uint32).view(np.uint64)[0]
        >> np.uint64(1)
    )


def rng(seed: int, *keys: int | str) -> np.random.Generator:
    """A numpy generator for one purpose."""
    return np.random.default_rng(derive_seed(seed, *keys))


def torch_generator(seed: int, *keys: int | str) -> torch.Generator:
    """A CPU torch generator for one purpose."""
    return torch.Generator().manual_seed(derive_seed(seed, *keys))
