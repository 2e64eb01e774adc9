"""Data sets by name (``data.dataset``, with ``data.dataset_args``), through
:class:`~fedsheaf.util.registry.Registry`; loading, checking and caching a split.

Built-ins: ``digits`` (scikit-learn's bundled 8×8 digits, one split: ``train``),
``mnist``, ``fashionmnist`` and ``cifar10`` (files in torchvision's layout under
``data.root``); their names are case-, ``-``- and ``_``-insensitive. A user's data set
is an installed plug-in (entry-point group ``fedsheaf.datasets``) or inline
``"package.module:callable"``. Each is a loader, called on every rank as::

    load(root: str, split: str, download: bool, **dataset_args)
        -> (x, y) | (x, y, n_classes) | torch.utils.data.Dataset

* ``root`` is ``data.root`` made absolute, ``split`` is ``"train"`` or ``"test"``,
  ``download`` is ``data.download`` (whether the loader may fetch missing files; with
  it, one rank loads first, alone, then the others).
* ``x``: a torch tensor or numpy array ``(N, *shape)``: images ``(N, C, H, W)`` or
  vectors ``(N, F)``; float (kept as float32) or uint8 (kept as stored; other integer
  types become float32). Finite values. Taken as given: no normalisation.
* ``y``: integer labels ``(N,)`` (tensor, array or list), class ids ``0..n_classes-1``.
* ``n_classes``: optional; by default ``max(y) + 1`` of that split.
* a map-style ``torch.utils.data.Dataset`` (``len(ds)``, ``ds[i]``) of ``(x_i, y_i)``
  items is read once and stacked.
* a :class:`fedsheaf.data.sources.Dataset` (what the built-ins return: samples as
  stored, with their normalisation) is taken as it is.

Graph (decentralized and hub) runs read ``data.split`` only; server-based runs read
``train`` and ``test``. A loader without the split asked for raises (any exception).
Every fault (the name does not import, the callable cannot be called so, it raised,
its return is of the wrong type or shape, labels outside ``0..n_classes-1``) is one
:class:`~fedsheaf.util.errors.ConfigError` or :class:`~fedsheaf.util.errors.DataError`
line naming ``data.dataset``.

Loaded splits are cached per process (keyed by name, absolute root, split and
arguments), so the returned tensors are shared: treat them as read-only.
"""

from __future__ import annotations

import inspect
import json
import numbers
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from fedsheaf.config.sections import DataConfig, ExperimentConfig
from fedsheaf.data.sources import (
    SPLITS,
    Dataset,
    builtin_name,
    builtin_shape,
    load_cifar10,
    load_digits,
    load_fashionmnist,
    load_mnist,
)
from fedsheaf.util.errors import ConfigError, DataError, FedsheafError
from fedsheaf.util.registry import Registry

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "clear_cache",
    "dataset_ref",
    "dataset_shape",
    "dataset_spec",
    "load_dataset",
    "load_split",
    "paired_splits",
    "splits_read",
]

#: ``data.dataset``: loaders by name.
DATASETS = Registry("dataset", "fedsheaf.datasets", "data.dataset", "data.dataset_args")
DATASETS.register("digits", load_digits)
DATASETS.register("mnist", load_mnist)
DATASETS.register("fashionmnist", load_fashionmnist)
DATASETS.register("cifar10", load_cifar10)

#: What a loader is called as, in messages.
CALL = "load(root, split, download, **data.dataset_args)"


class DatasetSpec(NamedTuple):
    """What a model is built for: one sample's shape (``(C, H, W)`` or ``(F,)``) and the
    number of classes."""

    shape: tuple[int, ...]
    n_classes: int


_CACHE: dict[tuple[str, str, str, str], Dataset] = {}  # (name, root, split, arguments)
#: (shape, n_classes) of every split loaded in this process (kept by clear_cache: small).
_SPECS: dict[tuple[str, str, str, str], DatasetSpec] = {}


def dataset_ref(name: str) -> str:
    """``data.dataset`` as the registry knows it: a built-in's canonical name
    (``Fashion-MNIST`` -> ``fashionmnist``), anything else stripped."""
    return builtin_name(name) or str(name).strip()


def _fault(ref: str, split: str, what: str, error: type[Exception] = DataError) -> Exception:
    return error(f"config key 'data.dataset': dataset {ref!r} ({split} split) {what}")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _args_key(args: Mapping[str, Any]) -> str:
    return json.dumps(dict(args), sort_keys=True, default=repr)


def _shown(args: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in args.items()) + "}"


_Key = tuple[str, str, str, str]


def _key(ref: str, root: str | Path, split: str, args: Mapping[str, Any]) -> _Key:
    root_key = "" if ref == "digits" else str(Path(root).expanduser().resolve())
    return (ref, root_key, split, _args_key(args))


def clear_cache() -> None:
    """Forget every loaded split (frees memory; the next load re-reads files)."""
    _CACHE.clear()


def load_dataset(
    name: str,
    root: str | Path,
    split: str = "train",
    download: bool = False,
    limit: int | None = None,
    args: Mapping[str, Any] | None = None,
) -> Dataset:
    """Load a whole split (cached per process), checked.

    Parameters
    ----------
    name:
        ``data.dataset``: a built-in (``digits``, ``mnist``, ``fashionmnist``,
        ``cifar10``; case-insensitive), an installed plug-in or ``module:callable``.
    root:
        ``data.root``: given to the loader made absolute (``digits`` ignores it).
    split:
        ``train`` or ``test``.
    download:
        Let the loader fetch missing files. Without it, a built-in's missing files
        raise a :class:`DataError` that lists the exact paths expected.
    limit:
        Keep only the first ``limit`` samples (quick runs and tests).
    args:
        ``data.dataset_args``: keyword arguments of the loader.
    """
    ref, args = dataset_ref(name), dict(args or {})
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} for dataset {ref!r}; valid: train, test")
    key = _key(ref, root, split, args)
    if key not in _CACHE:
        ds = _load(ref, key[1] or str(Path(root).expanduser().resolve()), split, download, args)
        _CACHE[key] = ds
        _SPECS[key] = DatasetSpec(tuple(ds.shape[1:]), ds.n_classes)
    ds = _CACHE[key]
    if limit is not None and limit < len(ds.y):
        ds = ds.head(limit)
    return ds


def load_split(dc: DataConfig, split: str, download: bool | None = None) -> Dataset:
    """``split`` of the data set ``dc`` (the ``data`` section) names, as configured."""
    fetch = dc.download if download is None else download
    return load_dataset(dc.dataset, dc.root, split, fetch, dc.limit, dc.dataset_args)


def dataset_shape(
    name: str,
    root: str | Path = ".",
    split: str = "train",
    download: bool = False,
    args: Mapping[str, Any] | None = None,
) -> tuple[int, ...]:
    """``(*shape, n_classes)`` of one sample of a data set (``(C, H, W, n_classes)`` for
    images): a built-in's without reading a file; a plug-in's by loading ``split``
    (once per process)."""
    spec = _spec(dataset_ref(name), root, split, download, dict(args or {}))
    return (*spec.shape, spec.n_classes)


def dataset_spec(dc: DataConfig, split: str | None = None) -> DatasetSpec:
    """:class:`DatasetSpec` of ``split`` (default ``data.split``) of ``dc``'s data set: a
    built-in's without reading a file, a plug-in's by loading it (once per process)."""
    return _spec(
        dataset_ref(dc.dataset), dc.root, split or dc.split, dc.download, dict(dc.dataset_args)
    )


def _spec(
    ref: str, root: str | Path, split: str, download: bool, args: dict[str, Any]
) -> DatasetSpec:
    known = builtin_shape(ref)
    if known is not None:
        return DatasetSpec(*known)
    key = _key(ref, root, split, args)
    if key not in _SPECS:
        load_dataset(ref, root, split, download, None, args)
    return _SPECS[key]


def splits_read(cfg: ExperimentConfig) -> tuple[str, ...]:
    """The splits of ``data.dataset`` a run of ``cfg`` reads: graph runs ``data.split``,
    server-based runs ``train`` and ``test`` (head_fedavg: its ``head.data``'s)."""
    if cfg.decentralized or cfg.hub_based:
        return (cfg.data.split,)
    if cfg.algorithm == "head_fedavg":
        if cfg.head.data != "geo":
            return ()
        return ("train",) if dataset_ref(cfg.data.dataset) == "digits" else SPLITS
    return SPLITS


def paired_splits(train: Dataset, test: Dataset, ref: str) -> tuple[Dataset, Dataset]:
    """A server-based run's train and test splits, checked to match: the same sample shape
    and the train split's classes (a plug-in's test split without the last classes counts
    the train split's)."""
    if train.shape[1:] != test.shape[1:]:
        raise _fault(
            ref,
            "test",
            f"has samples of shape {tuple(test.shape[1:])} but its train split "
            f"{tuple(train.shape[1:])}",
        )
    n = train.n_classes
    top = int(test.y.max()) if len(test.y) else -1
    if top >= n:
        raise _fault(
            ref, "test", f"has label {top}, outside the train split's {n} classes 0..{n - 1}"
        )
    return train, (test if test.n_classes == n else replace(test, n_classes=n))


# ---------------------------------------------------------------- calling and checking a loader


def _load(ref: str, root: str, split: str, download: bool, args: dict[str, Any]) -> Dataset:
    loader = DATASETS.resolve(ref)  # ConfigError naming data.dataset: unknown, no import
    builtin = builtin_name(ref) is not None  # (fedsheaf's own: their messages name files)
    try:
        inspect.signature(loader).bind(root, split, download, **args)
    except TypeError as exc:
        with_args = f" with data.dataset_args {_shown(args)}" if args else ""
        raise ConfigError(
            f"config key 'data.dataset': dataset {ref!r} cannot be called as {CALL}"
            f"{with_args}: {exc}"
        ) from None
    except ValueError:  # no signature to read (some built-ins): let the call decide
        pass
    try:
        out = loader(root, split, download, **args)
    except FedsheafError as exc:
        if builtin:  # the built-ins' own messages (missing or damaged files)
            raise
        raise _fault(ref, split, f"could not be loaded: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # the user's loader failed: said in one line
        raise _fault(
            ref, split, f"could not be loaded: its loader raised {_one_line(exc)}"
        ) from None
    return _as_dataset(out, ref, split)


def _as_dataset(out: Any, ref: str, split: str) -> Dataset:
    """A loader's return as a checked :class:`Dataset` (see the module's docstring)."""
    n: Any = None  # n_classes as returned (None: max(y) + 1)
    if isinstance(out, Dataset):
        x = _samples(out.pixels, ref, split)
        ds = replace(out, pixels=x, y=_labels(out.y, x.shape[0], ref, split))
        _check_classes(ds.y, out.n_classes, ref, split)
        return ds
    if isinstance(out, tuple | list) and len(out) in (2, 3):
        x = _samples(out[0], ref, split)
        y = _labels(out[1], x.shape[0], ref, split)
        n = out[2] if len(out) == 3 else None
    elif isinstance(out, torch.utils.data.Dataset):
        x, y = _stacked(out, ref, split)
    else:
        raise _fault(
            ref,
            split,
            f"returned {type(out).__name__}; a loader returns (x, y), (x, y, n_classes) or "
            "a map-style torch.utils.data.Dataset of (x, y) items",
        )
    n_classes = _check_classes(y, n, ref, split)
    return Dataset(ref, x, y, n_classes, 1.0, (0.0,), (1.0,))


def _stacked(ds: Any, ref: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A map-style torch Dataset's ``(x, y)`` items, read once and stacked."""
    try:
        n = len(ds)
    except TypeError:
        raise _fault(
            ref, split, "returned a torch Dataset without len(): it must be map-style"
        ) from None
    if n == 0:
        raise _fault(ref, split, "returned an empty Dataset (no samples)")
    xs, ys = [], []
    for i in range(n):
        try:
            item = ds[i]
        except Exception as exc:
            raise _fault(ref, split, f"Dataset item {i} raised {_one_line(exc)}") from None
        if not isinstance(item, tuple | list) or len(item) < 2:
            raise _fault(
                ref, split, f"Dataset item {i} is {type(item).__name__}, not an (x, y) pair"
            )
        xi, yi = item[0], item[1]
        if not isinstance(xi, torch.Tensor | np.ndarray | numbers.Real):
            raise _fault(
                ref,
                split,
                f"Dataset item {i}'s sample is {type(xi).__name__}, not a tensor or array "
                "(give it a transform that makes tensors, e.g. torchvision's ToTensor())",
            )
        xs.append(torch.as_tensor(np.asarray(xi) if isinstance(xi, np.ndarray) else xi))
        ys.append(int(yi.item()) if isinstance(yi, torch.Tensor | np.ndarray) else yi)
    shapes = {tuple(t.shape) for t in xs}
    if len(shapes) > 1:
        raise _fault(
            ref, split, f"Dataset items have samples of different shapes {sorted(shapes)[:2]}"
        )
    x = torch.stack(xs)
    if x.dim() == 1:  # scalar samples: vectors of one feature
        x = x.unsqueeze(1)
    return _samples(x, ref, split), _labels(ys, n, ref, split)


def _samples(x: Any, ref: str, split: str) -> torch.Tensor:
    """``x`` as a CPU tensor: uint8 kept, other real types as float32; checked."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "uif":
            raise _fault(ref, split, f"returned samples x of dtype {x.dtype}; give floats or uint8")
        arr = np.ascontiguousarray(x if x.dtype == np.uint8 else x.astype(np.float32))
        t = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
    elif isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.dtype == torch.bool or t.is_complex():
            raise _fault(ref, split, f"returned samples x of dtype {t.dtype}; give floats or uint8")
        if t.dtype != torch.uint8:
            t = t.to(torch.float32)
    else:
        raise _fault(
            ref, split, f"returned samples x of type {type(x).__name__}, not a tensor or array"
        )
    if t.dim() < 2 or t.shape[0] == 0 or 0 in t.shape[1:]:
        raise _fault(
            ref,
            split,
            f"returned samples x of shape {tuple(t.shape)}; give (N, *shape) with N >= 1: "
            "images (N, C, H, W) or vectors (N, F)",
        )
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise _fault(ref, split, "returned samples x that hold NaN or infinite values")
    return t


def _labels(y: Any, n: int, ref: str, split: str) -> torch.Tensor:
    """``y`` as an int64 vector of ``n`` labels; checked (not their range)."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    try:
        arr = np.asarray(y)
    except Exception:  # (ragged lists and the like)
        arr = np.asarray(None)
    if arr.dtype.kind not in "iu":
        what = type(y).__name__ if arr.dtype == object else f"dtype {arr.dtype}"
        raise _fault(ref, split, f"returned labels y of {what}; give integer class ids")
    if arr.ndim != 1:
        raise _fault(ref, split, f"returned labels y of shape {arr.shape}; give a vector (N,)")
    if len(arr) != n:
        raise _fault(ref, split, f"returned {n} samples but {len(arr)} labels")
    if len(arr) and int(arr.min()) < 0:
        raise _fault(ref, split, f"has label {int(arr.min())}; labels are class ids 0..n_classes-1")
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.int64))


def _check_classes(y: torch.Tensor, n: Any, ref: str, split: str) -> int:
    """The number of classes (``n``, else ``max(y) + 1``), every label below it."""
    top = int(y.max())
    if n is None:
        return top + 1
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise _fault(ref, split, f"returned n_classes {n!r}; give a positive integer")
    if top >= int(n):
        raise _fault(ref, split, f"has label {top}, outside its {int(n)} classes 0..{int(n) - 1}")
    return int(n)
