"""Atomic file writes for the theory commands (temp file in the same folder + os.replace)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic", "write_json_atomic", "save_figure_atomic"]


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # open(..., "xb") rather than mkstemp so that the file mode follows the umask
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON; NaN/inf are refused (``allow_nan=False``)."""
    data = (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode("utf-8")
    return write_atomic(path, lambda fh: fh.write(data))


def save_figure_atomic(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """Save a matplotlib figure atomically as PNG."""
    return write_atomic(path, lambda fh: fig.savefig(fh, format="png", **kwargs))
