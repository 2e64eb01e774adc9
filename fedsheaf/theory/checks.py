"""Argument checks shared by the theory commands: one message format for every range."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsheaf.util.errors import ConfigError


def check_int(what: str, val: Any, lo: int) -> None:
    """``val`` is an integer ``>= lo`` (``what`` names it in the message)."""
    if isinstance(val, bool) or not isinstance(val, int | np.integer) or val < lo:
        raise ConfigError(f"{what} must be an integer >= {lo}, got {val!r}")


def check_real(what: str, val: Any, lo: float, hi: float = np.inf, strict: bool = False) -> None:
    """``val`` is a finite real in ``[lo, hi]`` (``(lo, hi]`` when ``strict``)."""
    ok = isinstance(val, int | float | np.floating) and not isinstance(val, bool)
    ok = ok and bool(np.isfinite(val)) and (val > lo if strict else val >= lo) and val <= hi
    if not ok:
        left = "(" if strict else "["
        right = ")" if np.isinf(hi) else "]"  # only finite values pass
        raise ConfigError(
            f"{what} must be a finite number in {left}{lo:g}, {hi:g}{right}, got {val!r}"
        )
