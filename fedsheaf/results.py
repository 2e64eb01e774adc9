"""Run directories: resolved config, per-round metrics, summary — written atomically.

Layout of a run directory::

    config.yaml      the resolved config (after overrides)
    metrics.jsonl    one JSON object per epoch/round (appended, flushed, fsynced)
    summary.json     final numbers, written once at the end
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from fedsheaf.errors import ConfigError


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tuples lists, numpy scalars floats."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2) + "\n")


class RunDir:
    """The directory one run writes into (only rank 0 creates one)."""

    def __init__(self, path: str | Path, overwrite: bool = False) -> None:
        self.path = Path(path)
        if (self.path / "summary.json").exists() and not overwrite:
            raise ConfigError(
                f"run directory {self.path} already holds a finished run; choose "
                "another output.name or pass output.overwrite=true"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        if overwrite:
            for name in ("metrics.jsonl", "summary.json"):
                (self.path / name).unlink(missing_ok=True)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def write_config(self, text: str) -> None:
        atomic_write_text(self.path / "config.yaml", text)

    def append_metrics(self, record: dict[str, Any]) -> None:
        line = json.dumps(_clean(record)) + "\n"
        with open(self.metrics_path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / "summary.json", summary)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete records of a metrics.jsonl file (a torn last line is skipped)."""
    records = []
    with open(path) as fh:
        for line in fh:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
