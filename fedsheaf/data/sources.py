"""Image data sets in memory, normalised row by row as they are taken.

Every loader returns the complete split: its pixels as stored (uint8 images from files;
scikit-learn's digits as float32 on their 0–16 scale) plus int64 labels, and
:meth:`Dataset.take` gives any rows as normalised float32 ``(n, C, H, W)``. A rank
converts only the rows it trains on (a FashionMNIST split held as float32 would be four
times its uint8 size on every rank). Files come from a data root in torchvision's
layout (``<root>/MNIST/raw/...``, ``<root>/cifar-10-batches-py/...``); they are
downloaded only when ``download=True``. The "digits" set ships with
scikit-learn and needs no files at all.

Loaded splits are cached per process (keyed by name, resolved root and split),
so the returned tensors are shared: treat them as read-only.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from fedsheaf.util.errors import DataError, relative_hint

__all__ = ["DATASETS", "Dataset", "clear_cache", "dataset_shape", "load_dataset"]


@dataclass
class Dataset:
    """One split of an image data set, in memory as stored.

    ``pixels`` ``(N, C, H, W)`` on the scale ``0..scale`` (uint8 images: 255), ``mean``
    and ``std`` per channel on the [0, 1] scale. :meth:`take` normalises the rows it is
    given; :attr:`x` all of them (a new tensor each time: for small sets and tests).
    """

    name: str
    pixels: torch.Tensor
    y: torch.Tensor  # int64 (N,)
    n_classes: int
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def take(self, rows: Any) -> torch.Tensor:
        """``(pixels[rows] / scale - mean) / std`` as float32, a new contiguous tensor."""
        x = (
            self.pixels[rows]
            .to(torch.float32, memory_format=torch.contiguous_format, copy=True)
            .div_(self.scale)
        )
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return x.sub_(mean).div_(std)

    @property
    def x(self) -> torch.Tensor:
        """Every row, normalised (:meth:`take` of all)."""
        return self.take(slice(None))

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, C, H, W)``."""
        return tuple(self.pixels.shape)

    def head(self, n: int) -> Dataset:
        """The first ``n`` samples (``data.limit``), sharing this split's memory."""
        return replace(self, pixels=self.pixels[:n], y=self.y[:n])


@dataclass(frozen=True)
class _Info:
    shape: tuple[int, int, int]  # (C, H, W)
    n_classes: int
    mean: tuple[float, ...]  # per channel, on the [0, 1] pixel scale
    std: tuple[float, ...]


# Per-dataset normalisation constants (training-split statistics of [0, 1] pixels).
_INFO: dict[str, _Info] = {
    "digits": _Info((1, 8, 8), 10, (0.3053,), (0.3760,)),
    "mnist": _Info((1, 28, 28), 10, (0.1307,), (0.3081,)),
    "fashionmnist": _Info((1, 28, 28), 10, (0.2860,), (0.3530,)),
    "cifar10": _Info((3, 32, 32), 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
DATASETS: tuple[str, ...] = tuple(_INFO)
_SPLITS = ("train", "test")

# Files torchvision needs under the data root. Its dataset classes check the files
# of both splits before loading either, so both are required.
_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_CIFAR_FILES = tuple(f"data_batch_{k}" for k in range(1, 6)) + ("test_batch", "batches.meta")
_TV_FOLDER = {"mnist": "MNIST", "fashionmnist": "FashionMNIST"}

# What torchvision raises for missing, corrupt or truncated files and failed downloads.
_LOAD_ERRORS = (
    RuntimeError,
    OSError,
    ValueError,
    TypeError,
    AssertionError,
    EOFError,
    pickle.UnpicklingError,
)

_CACHE: dict[tuple[str, str, str], Dataset] = {}


def _canonical(name: str) -> str:
    key = str(name).strip().lower().replace("-", "").replace("_", "")
    if key not in _INFO:
        raise DataError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return key


def dataset_shape(name: str) -> tuple[int, int, int, int]:
    """Return ``(C, H, W, n_classes)`` of a data set without loading it."""
    info = _INFO[_canonical(name)]
    return (*info.shape, info.n_classes)


def black_level(name: str) -> tuple[float, ...]:
    """A black pixel (0 on the [0, 1] scale) in the dataset's normalised units, per channel.

    Padding that happens before normalisation (torchvision's ``RandomCrop(padding=4)``
    on images) fills with this value once the batch is normalised.
    """
    info = _INFO[_canonical(name)]
    return tuple(-m / s for m, s in zip(info.mean, info.std, strict=True))


def expected_files(name: str, root: str | Path, split: str = "train") -> list[Path]:
    """Paths that must exist under ``root`` to load ``name``/``split`` offline.

    torchvision checks the files of both splits whichever split is asked for, so
    the list is the same for ``train`` and ``test``.
    """
    key = _canonical(name)
    if split not in _SPLITS:
        raise DataError(f"unknown split {split!r} for dataset {key!r}; valid: train, test")
    root = Path(root)
    if key == "digits":
        return []
    if key == "cifar10":
        return [root / "cifar-10-batches-py" / f for f in _CIFAR_FILES]
    return [root / _TV_FOLDER[key] / "raw" / f for f in _IDX_FILES]


def clear_cache() -> None:
    """Forget every loaded split (frees memory; the next load re-reads files)."""
    _CACHE.clear()


def load_dataset(
    name: str,
    root: str | Path,
    split: str = "train",
    download: bool = False,
    limit: int | None = None,
) -> Dataset:
    """Load a whole split as normalised tensors.

    Parameters
    ----------
    name:
        ``digits``, ``mnist``, ``fashionmnist`` or ``cifar10`` (case-insensitive).
    root:
        Data root in torchvision's layout. Ignored for ``digits``.
    split:
        ``train`` or ``test``. ``digits`` has one split only: ``train`` is all
        1,797 images and ``test`` raises :class:`DataError` (carve validation and
        test sets out of it with a partition instead).
    download:
        Let torchvision fetch missing files. Without it, missing files raise a
        :class:`DataError` that lists the exact paths expected.
    limit:
        Keep only the first ``limit`` samples (quick runs and tests).
    """
    key = _canonical(name)
    if split not in _SPLITS:
        raise DataError(f"unknown split {split!r} for dataset {key!r}; valid: train, test")
    root_key = "" if key == "digits" else str(Path(root).expanduser().resolve())
    cache_key = (key, root_key, split)
    if cache_key not in _CACHE:
        if key == "digits":
            ds = _load_digits(split)
        else:
            ds = _load_torchvision(key, Path(root_key), split, download)
        _CACHE[cache_key] = ds
    ds = _CACHE[cache_key]
    if limit is not None and limit < len(ds.y):
        ds = ds.head(limit)
    return ds


def _load_digits(split: str) -> Dataset:
    if split != "train":
        raise DataError(
            "dataset 'digits' has a single split: use split='train' (all 1,797 images) "
            "and hold out validation/test samples with a partition"
        )
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = torch.from_numpy(np.asarray(bunch.images, dtype=np.float32)).unsqueeze(1)
    y = torch.from_numpy(np.asarray(bunch.target, dtype=np.int64))
    info = _INFO["digits"]
    return Dataset("digits", pixels, y, info.n_classes, 16.0, info.mean, info.std)


def _missing_message(key: str, root: Path, split: str, missing: list[Path]) -> str:
    files = ", ".join(str(p) for p in missing)
    return (
        f"dataset {key!r} ({split} split) not found under data root {root}"
        f"{relative_hint(root)}: missing {files} "
        f"(torchvision needs the files of both splits). "
        f"Put the files there, or set data.download=true to fetch them."
    )


def require_files(name: str, root: str | Path, split: str = "train") -> None:
    """Refuse (:class:`DataError`, naming what is missing) a data set whose files are not
    all under ``root``: what loading it without ``download`` would do, without loading."""
    missing = [p for p in expected_files(name, root, split) if not p.is_file()]
    if missing:
        raise DataError(_missing_message(_canonical(name), Path(root), split, missing))


#: IDX magic numbers (uint8 payload, 3 and 1 dimensions) by file-name part.
_IDX_MAGIC = {"images": (0x0803, 3), "labels": (0x0801, 1)}


def _idx_problem(path: Path) -> str | None:
    """What is wrong with an IDX file's header or length (None: nothing found)."""
    magic, ndim = _IDX_MAGIC["images" if "images" in path.name else "labels"]
    with open(path, "rb") as fh:
        head = fh.read(4 + 4 * ndim)
    size = path.stat().st_size
    if len(head) < 4 + 4 * ndim or int.from_bytes(head[:4], "big") != magic:
        return f"{path} is not an IDX file (damaged, or another file under its name)"
    dims = [int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = 4 + 4 * ndim + math.prod(dims)
    if size != expected:
        return f"{path} is damaged or truncated ({size} bytes, its header says {expected})"
    return None


def damaged_file(key: str, root: Path) -> str | None:
    """Which of dataset ``key``'s files under ``root`` is damaged, in words (None: none
    found): IDX headers and lengths; CIFAR-10 batches against torchvision's checksums."""
    if key == "cifar10":
        from torchvision.datasets import CIFAR10
        from torchvision.datasets.utils import check_integrity

        folder = root / CIFAR10.base_folder
        meta = (CIFAR10.meta["filename"], CIFAR10.meta["md5"])
        for name, md5 in [*CIFAR10.train_list, *CIFAR10.test_list, meta]:
            if (folder / name).is_file() and not check_integrity(str(folder / name), md5):
                return f"{folder / name} is damaged or truncated (its checksum differs)"
        return None
    for path in expected_files(key, root):
        if path.is_file() and (problem := _idx_problem(path)):
            return problem
    return None


def _load_torchvision(key: str, root: Path, split: str, download: bool) -> Dataset:
    from torchvision import datasets as tvd

    info = _INFO[key]
    if not download:
        require_files(key, root, split)
    cls = {"mnist": tvd.MNIST, "fashionmnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10}[key]
    try:
        tv = cls(root=str(root), train=(split == "train"), download=download)
    except _LOAD_ERRORS as exc:
        text = str(exc).strip()
        why = damaged_file(key, root) or (text.splitlines()[0] if text else type(exc).__name__)
        raise DataError(
            f"cannot load dataset {key!r} ({split} split) from data root {root}: {why}. "
            f"Expected files: {', '.join(str(p) for p in expected_files(key, root, split))}"
        ) from None
    data = tv.data
    if isinstance(data, np.ndarray):  # CIFAR: uint8 (N, H, W, C)
        x_u8 = torch.from_numpy(data).permute(0, 3, 1, 2)
    else:  # MNIST family: uint8 tensor (N, H, W)
        x_u8 = data.unsqueeze(1)
    y = torch.as_tensor(np.asarray(tv.targets), dtype=torch.int64).reshape(-1)
    if x_u8.shape[1:] != info.shape or x_u8.shape[0] != y.shape[0]:
        raise DataError(
            f"dataset {key!r} under {root} has images of shape {tuple(x_u8.shape[1:])} and "
            f"{y.shape[0]} labels for {x_u8.shape[0]} images; expected {info.shape}"
        )
    outside = y[(y < 0) | (y >= info.n_classes)]
    if outside.numel():
        raise DataError(
            f"dataset {key!r} under {root} ({split} split) has label {int(outside[0])}, "
            f"outside its {info.n_classes} classes 0..{info.n_classes - 1}: a damaged labels "
            f"file, or another file under its name. Its files: "
            f"{', '.join(str(p) for p in expected_files(key, root, split))}"
        )
    return Dataset(key, x_u8, y, info.n_classes, 255.0, info.mean, info.std)


class Samples(Protocol):
    """What :func:`data_digest` reads: samples (any rows of them, as float tensors) and
    their labels or targets ``y``."""

    y: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]: ...

    def take(self, rows: Any) -> torch.Tensor: ...


def data_digest(ds: Samples) -> str:
    """A fingerprint of a data set's contents (samples and labels or targets, after
    loading and ``data.limit``): what checkpoints record, so that a resume can tell data
    files that changed since (a resume may read them from another ``data.root``)."""
    h = hashlib.blake2b(digest_size=16)
    # the samples (and real-valued targets) on a grid of 1/1024: a last-bit difference in
    # how another torch normalises the pixels does not move them (a channel's samples
    # take at most 256 values, none of them near a rounding boundary of the grid in practice)
    # (the type: ignores: numpy's stubs give ndarray the buffer protocol on Python >= 3.12 only)
    h.update(str((tuple(ds.y.shape), tuple(ds.shape))).encode())
    y = ds.y.cpu()
    h.update((torch.round(y * 1024).to(torch.int64) if y.is_floating_point() else y).numpy())  # type: ignore[arg-type]
    for start in range(0, ds.shape[0], 4096):  # in chunks: the samples are never all floats
        chunk = ds.take(slice(start, start + 4096))
        h.update(torch.round(chunk.cpu() * 1024).to(torch.int32).contiguous().numpy())  # type: ignore[arg-type]
    return h.hexdigest()
