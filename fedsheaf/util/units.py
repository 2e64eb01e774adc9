"""Numbers for people to read (no torch: report and watch import it)."""

from __future__ import annotations

from typing import Any


def human_bytes(n: Any, *, compact: bool = False) -> str:
    """A byte count for people to read; the one byte formatter in fedsheaf.

    Parameters
    ----------
    n:
        Number of bytes; anything that is not a number (e.g. a missing value,
        ``None``) gives ``"–"``.
    compact:
        The short form of the live progress lines (a job's and ``watch``'s):
        ``"0.25 MB"`` from 100 kB up, ``"42.0 kB"`` below. Otherwise the table form:
        GB, MB or kB with two decimals (``"3.30 kB"``), plain bytes below 1 kB
        (``"512 B"``).

    Examples
    --------
    >>> human_bytes(250_000, compact=True), human_bytes(1000, compact=True)
    ('0.25 MB', '1.0 kB')
    >>> human_bytes(3300), human_bytes(2.5e9), human_bytes(512), human_bytes(None)
    ('3.30 kB', '2.50 GB', '512 B', '–')
    """
    if not isinstance(n, int | float):
        return "–"
    if compact:
        return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def decimals(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` decimals; "–" for a missing or undefined one (NaN: the
    communication accuracy of agents without neighbours).

    >>> decimals(0.91234), decimals(float("nan")), decimals(None), decimals(12.0, 1)
    ('0.912', '–', '–', '12.0')
    """
    return f"{value:.{digits}f}" if isinstance(value, int | float) and value == value else "–"


def count(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1: ``count(1, "rank") == "1 rank"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
