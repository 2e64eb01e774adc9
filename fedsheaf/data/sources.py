"""Data sets in memory, normalised row by row as they are taken; the built-in loaders.

A loaded split is a :class:`Dataset`: its samples as stored (uint8 images from files;
scikit-learn's digits as float32 on their 0–16 scale; a plug-in's as it gave them) plus
int64 labels, and :meth:`Dataset.take` gives any rows as normalised float32
``(n, *shape)``. A rank converts only the rows it trains on (a FashionMNIST split held
as float32 would be four times its uint8 size on every rank).

The built-in loaders (:func:`load_digits`, :func:`load_mnist`, :func:`load_fashionmnist`,
:func:`load_cifar10`) follow the loader protocol of
:mod:`fedsheaf.data.datasets_registry`, which registers them and loads (and caches) any
data set by name. Files come from a data root in torchvision's layout
(``<root>/MNIST/raw/...``, ``<root>/cifar-10-batches-py/...``); without ``download``
only the files of the split asked for are read (``data.split=test`` needs MNIST's
``t10k`` files only); with it torchvision fetches what is missing. The "digits" set
ships with scikit-learn and needs no files at all.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import math
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from fedsheaf.util.errors import DataError, relative_hint

__all__ = [
    "BUILTIN_DATASETS",
    "Dataset",
    "black_level",
    "builtin_name",
    "data_digest",
    "expected_files",
    "require_files",
]


@dataclass
class Dataset:
    """One split of a data set, in memory as stored.

    ``pixels`` ``(N, *shape)``: images ``(N, C, H, W)`` or vectors ``(N, F)``, on the
    scale ``0..scale`` (uint8 images: 255); ``mean`` and ``std`` per channel (the
    second axis; one value for all) on the [0, 1] scale. :meth:`take` normalises the
    rows it is given; :attr:`x` all of them (a new tensor each time: for small sets and
    tests). A plug-in's data are taken as given: scale 1, mean 0, std 1.
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
        if self.scale == 1.0 and not any(self.mean) and all(s == 1.0 for s in self.std):
            return x  # taken as given (a plug-in's data): nothing to normalise
        view = (1, -1) + (1,) * (x.dim() - 2)  # per channel: images (1, C, 1, 1)
        mean = torch.tensor(self.mean, dtype=torch.float32).view(view)
        std = torch.tensor(self.std, dtype=torch.float32).view(view)
        return x.sub_(mean).div_(std)

    @property
    def x(self) -> torch.Tensor:
        """Every row, normalised (:meth:`take` of all)."""
        return self.take(slice(None))

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, *shape)``: ``(N, C, H, W)`` for images."""
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
#: The built-in data sets, by canonical name.
BUILTIN_DATASETS: tuple[str, ...] = tuple(_INFO)
SPLITS = ("train", "test")

# The files of each split under the data root, in torchvision's layout (IDX prefixes
# of the MNIST family; CIFAR-10's pickled batches). Without download only the split
# asked for is read.
_IDX_PREFIX = {"train": "train", "test": "t10k"}
_CIFAR_SPLIT = {"train": tuple(f"data_batch_{k}" for k in range(1, 6)), "test": ("test_batch",)}
_CIFAR_FILES = (*_CIFAR_SPLIT["train"], *_CIFAR_SPLIT["test"], "batches.meta")
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


def builtin_name(name: str) -> str | None:
    """The canonical name of a built-in data set (case, ``-`` and ``_`` aside:
    ``Fashion-MNIST`` is ``fashionmnist``), or None for any other name."""
    key = str(name).strip().lower().replace("-", "").replace("_", "")
    return key if key in _INFO else None


def builtin_shape(name: str) -> tuple[tuple[int, ...], int] | None:
    """``((C, H, W), n_classes)`` of a built-in data set without reading a file; None for
    any other name."""
    key = builtin_name(name)
    return None if key is None else (_INFO[key].shape, _INFO[key].n_classes)


def black_level(name: str) -> tuple[float, ...]:
    """A black pixel (0 on the [0, 1] scale) in the dataset's normalised units, per channel.

    Padding that happens before normalisation (torchvision's ``RandomCrop(padding=4)``
    on images) fills with this value once the batch is normalised. A plug-in's data,
    taken as given, pad with 0.
    """
    key = builtin_name(name)
    if key is None:
        return (0.0,)
    info = _INFO[key]
    return tuple(-m / s for m, s in zip(info.mean, info.std, strict=True))


def _check_split(name: str, split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} for dataset {name!r}; valid: train, test")


def expected_files(name: str, root: str | Path, split: str = "train") -> list[Path]:
    """Paths that must exist under ``root`` to load ``name``/``split`` offline: the files
    of that split only (none for ``digits`` and for a plug-in, whose files are its own)."""
    key = builtin_name(name)
    _check_split(key or str(name), split)
    root = Path(root)
    if key is None or key == "digits":
        return []
    if key == "cifar10":
        return [root / "cifar-10-batches-py" / f for f in _CIFAR_SPLIT[split]]
    prefix = _IDX_PREFIX[split]
    return [
        root / _TV_FOLDER[key] / "raw" / f"{prefix}-{part}-idx{dims}-ubyte"
        for part, dims in (("images", 3), ("labels", 1))
    ]


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: images ``(1797, 8, 8)`` on their 0–16 scale and labels.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``: 64
    pixels and the label a row), as its ``load_digits`` reads it, without importing
    scikit-learn: that import costs a process about 1 s and 0.1 GB, most of a small
    run's start. Through ``load_digits`` where the file is not found there.
    """
    spec = importlib.util.find_spec("sklearn")  # (finds the package, imports nothing)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as rows:
                table = np.loadtxt(rows, delimiter=",")
            return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn import datasets as sklearn_datasets

    bunch = sklearn_datasets.load_digits()
    return bunch.images, bunch.target


def load_digits(root: str, split: str, download: bool) -> Dataset:
    """scikit-learn's bundled 8×8 digits (``root`` and ``download`` unused). One split
    only: ``train`` is all 1,797 images and ``test`` raises :class:`DataError` (carve
    validation and test sets out of it with a partition instead)."""
    if split != "train":
        raise DataError(
            "dataset 'digits' has a single split: use split='train' (all 1,797 images) "
            "and hold out validation/test samples with a partition"
        )
    images, labels = _digits_arrays()
    pixels = torch.from_numpy(np.asarray(images, dtype=np.float32)).unsqueeze(1)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    info = _INFO["digits"]
    return Dataset("digits", pixels, y, info.n_classes, 16.0, info.mean, info.std)


def _missing_message(key: str, root: Path, split: str, missing: list[Path]) -> str:
    files = ", ".join(str(p) for p in missing)
    return (
        f"dataset {key!r} ({split} split) not found under data root {root}"
        f"{relative_hint(root)}: missing {files}. "
        f"Put the files there, or set data.download=true to fetch them."
    )


def require_files(name: str, root: str | Path, split: str = "train") -> None:
    """Refuse (:class:`DataError`, naming what is missing) a data set whose files of
    ``split`` are not all under ``root``: what loading it without ``download`` would do,
    without loading (a plug-in's files are its own: nothing is checked)."""
    missing = [p for p in expected_files(name, root, split) if not p.is_file()]
    if missing:
        raise DataError(_missing_message(builtin_name(name) or name, Path(root), split, missing))


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


def damaged_file(key: str, root: Path, split: str | None = None) -> str | None:
    """Which of dataset ``key``'s files of ``split`` (None: of both) under ``root`` is
    damaged, in words (None: none found): IDX headers and lengths; CIFAR-10 batches
    against torchvision's checksums."""
    splits = SPLITS if split is None else (split,)
    if key == "cifar10":
        from torchvision.datasets import CIFAR10
        from torchvision.datasets.utils import check_integrity

        folder = root / CIFAR10.base_folder
        listed = {"train": CIFAR10.train_list, "test": CIFAR10.test_list}
        checked = [pair for s in splits for pair in listed[s]]
        if split is None:
            checked.append([CIFAR10.meta["filename"], CIFAR10.meta["md5"]])
        for name, md5 in checked:
            if (folder / name).is_file() and not check_integrity(str(folder / name), md5):
                return f"{folder / name} is damaged or truncated (its checksum differs)"
        return None
    for path in (p for s in splits for p in expected_files(key, root, s)):
        if path.is_file() and (problem := _idx_problem(path)):
            return problem
    return None


def load_mnist(root: str, split: str, download: bool) -> Dataset:
    """MNIST from ``<root>/MNIST/raw`` (the split's IDX files)."""
    return _load_torchvision("mnist", Path(root), split, download)


def load_fashionmnist(root: str, split: str, download: bool) -> Dataset:
    """FashionMNIST from ``<root>/FashionMNIST/raw`` (the split's IDX files)."""
    return _load_torchvision("fashionmnist", Path(root), split, download)


def load_cifar10(root: str, split: str, download: bool) -> Dataset:
    """CIFAR-10 from ``<root>/cifar-10-batches-py`` (the split's pickled batches)."""
    return _load_torchvision("cifar10", Path(root), split, download)


def _legacy_processed(key: str, root: Path) -> bool:
    """Whether torchvision would read the MNIST family's legacy ``processed/*.pt`` files
    (it prefers them to the raw files where both are intact)."""
    if key == "cifar10":
        return False
    from torchvision.datasets.utils import check_integrity

    folder = root / _TV_FOLDER[key] / "processed"
    return all(check_integrity(str(folder / f)) for f in ("training.pt", "test.pt"))


def _read_split(key: str, root: Path, split: str) -> tuple[Any, Any]:
    """The split's images and labels as torchvision's own readers give them, reading only
    that split's files: (uint8 (N, H, W) tensor, int64 labels) for the MNIST family,
    (uint8 (N, H, W, C) array, label list) for CIFAR-10, as ``cls.data``/``cls.targets``."""
    if key == "cifar10":
        from torchvision.datasets import CIFAR10
        from torchvision.datasets.utils import check_integrity

        folder = root / CIFAR10.base_folder
        listed = CIFAR10.train_list if split == "train" else CIFAR10.test_list
        data: list[Any] = []
        targets: list[int] = []
        for name, md5 in listed:  # as CIFAR10.__init__ reads them, its checksums first
            if not check_integrity(str(folder / name), md5):
                raise RuntimeError(f"{folder / name} is damaged or truncated")
        for name, _ in listed:
            with open(folder / name, "rb") as fh:
                entry = pickle.load(fh, encoding="latin1")
            data.append(entry["data"])
            targets.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
        return np.vstack(data).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1)), targets
    from torchvision.datasets.mnist import read_image_file, read_label_file

    paths = expected_files(key, root, split)
    return read_image_file(str(paths[0])), read_label_file(str(paths[1]))


def _load_torchvision(key: str, root: Path, split: str, download: bool) -> Dataset:
    from torchvision import datasets as tvd

    info = _INFO[key]
    if not download:
        require_files(key, root, split)
    cls = {"mnist": tvd.MNIST, "fashionmnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10}[key]
    try:
        if download or _legacy_processed(key, root):  # torchvision fetches (or reads) it
            tv = cls(root=str(root), train=(split == "train"), download=download)
            data, targets = tv.data, tv.targets
        else:  # the split's own files only
            data, targets = _read_split(key, root, split)
    except _LOAD_ERRORS as exc:
        text = str(exc).strip()
        why = damaged_file(key, root, None if download else split) or (
            text.splitlines()[0] if text else type(exc).__name__
        )
        raise DataError(
            f"cannot load dataset {key!r} ({split} split) from data root {root}: {why}. "
            f"Expected files: {', '.join(str(p) for p in expected_files(key, root, split))}"
        ) from None
    if isinstance(data, np.ndarray):  # CIFAR: uint8 (N, H, W, C)
        x_u8 = torch.from_numpy(data).permute(0, 3, 1, 2)
    else:  # MNIST family: uint8 tensor (N, H, W)
        x_u8 = data.unsqueeze(1)
    y = torch.as_tensor(np.asarray(targets), dtype=torch.int64).reshape(-1)
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


#: The largest float32 below 2**31: the digest's grid values are clamped to it.
_INT32_EDGE = 2**31 - 128


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
        # (clamped: a plug-in's large values stay defined; the images' never reach it)
        grid = torch.round(chunk.cpu() * 1024).clamp_(-_INT32_EDGE, _INT32_EDGE)
        h.update(grid.to(torch.int32).contiguous().numpy())  # type: ignore[arg-type]
    return h.hexdigest()
