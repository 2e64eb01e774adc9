"""Deterministic mini-batches over in-memory tensors (no DataLoader workers).

The order of an epoch is a pure function of ``(seed, epoch)``, so a resumed run
sees the same batches, and ranks that pass the same seed see the same stream
(how pilot batches are shared). Batches are gathered with one index tensor on
the data's device, which keeps this fast on a GPU as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

__all__ = ["batches", "epoch_order", "n_batches", "random_crop_flip"]


def n_batches(n: int | Sequence[int] | np.ndarray, batch_size: int, drop_last: bool = False) -> int:
    """Number of batches :func:`batches` yields for ``n`` items (or an index array)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    count = n if isinstance(n, int | np.integer) else len(n)
    return int(count) // batch_size if drop_last else -(-int(count) // batch_size)


def epoch_order(
    indices: Sequence[int] | np.ndarray | torch.Tensor, seed: int, epoch: int, shuffle: bool = True
) -> np.ndarray:
    """The indices in the order epoch ``epoch`` visits them (int64 numpy array)."""
    idx = np.asarray(
        indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64
    ).reshape(-1)
    if shuffle:
        idx = np.random.default_rng([int(seed), int(epoch)]).permutation(idx)
    return idx


def batches(
    x: torch.Tensor,
    y: torch.Tensor,
    indices: Sequence[int] | np.ndarray | torch.Tensor,
    batch_size: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(x[b], y[b])`` for the batches ``b`` of one epoch over ``indices``.

    The permutation comes from ``numpy.random.default_rng([seed, epoch])``; with
    ``shuffle=False`` the given order is kept. The last short batch is dropped
    when ``drop_last`` is set.
    """
    count = n_batches(len(indices), batch_size, drop_last)
    order = torch.from_numpy(epoch_order(indices, seed, epoch, shuffle)).to(x.device)
    order_y = order if y.device == x.device else order.to(y.device)
    for k in range(count):
        sl = slice(k * batch_size, (k + 1) * batch_size)
        yield x.index_select(0, order[sl]), y.index_select(0, order_y[sl])


def random_crop_flip(
    xb: torch.Tensor,
    pad: int,
    generator: torch.Generator,
    flip: bool = True,
    fill: float | Sequence[float] = 0.0,
) -> torch.Tensor:
    """Batched random crop (padding by ``pad`` filled with ``fill``) and horizontal flip.

    CIFAR's ``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip`` applied to a whole
    ``(B, C, H, W)`` batch at once. ``fill`` is in the batch's units, one value or one
    per channel: torchvision pads images with black *before* normalising, so for a
    normalised batch pass :func:`~fedsheaf.data.sources.black_level` (0 would pad with
    the mean colour). Offsets and flips are drawn from ``generator`` (a CPU generator)
    and moved to the batch's device.
    """
    b, c, h, w = xb.shape
    if pad > 0:
        level = torch.as_tensor(fill, dtype=xb.dtype, device=xb.device).reshape(-1, 1, 1)
        padded = level.expand(b, c, h + 2 * pad, w + 2 * pad).clone()
        padded[:, :, pad : pad + h, pad : pad + w] = xb
        off = torch.randint(0, 2 * pad + 1, (2, b), generator=generator).to(xb.device)
        rows = (off[0][:, None] + torch.arange(h, device=xb.device))[:, None, :, None]
        cols = (off[1][:, None] + torch.arange(w, device=xb.device))[:, None, None, :]
        bi = torch.arange(b, device=xb.device)[:, None, None, None]
        ci = torch.arange(c, device=xb.device)[None, :, None, None]
        xb = padded[bi, ci, rows, cols]
    if flip:
        mask = (torch.rand(b, generator=generator) < 0.5).to(xb.device)
        xb = torch.where(mask[:, None, None, None], xb.flip(-1), xb)
    return xb
