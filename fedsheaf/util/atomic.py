"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from fedsheaf.util.errors import WriteError, os_error


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(fh)`` on a temporary file beside ``path``, fsync it, rename it over ``path``.

    Readers see the old file or the new one, never half of one; a crash leaves
    at most a hidden ``.name.*.tmp`` file behind. A write that fails (a full disk) raises
    :class:`~fedsheaf.util.errors.WriteError`, naming ``path`` and the reason.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # open(..., "xb") rather than mkstemp so that the file mode follows the umask
    # (the name cut short, so that a name near the 255-byte limit still has a temp file)
    tmp = path.with_name(f".{path.name[:100]}.{uuid.uuid4().hex[:16]}.tmp")
    try:
        with open(tmp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if not isinstance(exc, WriteError) and os_error(exc) is not None:
            raise WriteError(path, exc) from exc
        raise  # (a bug in ``write`` stays what it is)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    data = text.encode("utf-8")
    return write_atomic(path, lambda fh: fh.write(data))


def save_figure(
    fig: Any, path: str | os.PathLike[str], *, close: bool = True, **savefig_kwargs: Any
) -> Path:
    """Save a matplotlib figure to ``path`` atomically (see :func:`write_atomic`).

    Parameters
    ----------
    fig:
        The matplotlib figure.
    path:
        Target file; its suffix (``.png``, ``.pdf``, ``.svg``, ...) picks the format.
    close:
        Close the figure afterwards (``plt.close(fig)``), freeing its memory.
    **savefig_kwargs:
        Passed on to ``fig.savefig`` (e.g. ``dpi``).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    # the temporary file's name ends in .tmp, so name the format explicitly
    fmt = savefig_kwargs.pop("format", None) or path.suffix.lstrip(".").lower() or "png"
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format=fmt, **savefig_kwargs))
    finally:
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)
    return path


def json_safe(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tuples lists, numpy scalars floats."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2) + "\n")
