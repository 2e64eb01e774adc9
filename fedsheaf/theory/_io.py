"""Atomic JSON and PNG writes for the theory commands (see fedsheaf.rundir.files.write_atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedsheaf.util.atomic import write_atomic
from fedsheaf.util.errors import ConfigError

__all__ = ["output_folder", "write_atomic", "write_json_atomic", "save_figure_atomic"]


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON; NaN/inf are refused (``allow_nan=False``)."""
    data = (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode("utf-8")
    return write_atomic(path, lambda fh: fh.write(data))


def save_figure_atomic(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """Save a matplotlib figure atomically as PNG."""
    return write_atomic(path, lambda fh: fig.savefig(fh, format="png", **kwargs))


def output_folder(path: str | Path) -> Path:
    """``--out``, created before any work so that an unusable one fails at once."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out} cannot be created: {exc.strerror or exc}") from None
    return out
