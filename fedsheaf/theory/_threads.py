"""Run tiny-matrix numerics with one BLAS thread.

The theory code works on 2×2 … 20×20 matrices, for which a multi-threaded BLAS only adds
synchronisation cost (10× slower on a loaded 2-core machine). ``threadpoolctl`` ships with
scikit-learn; without it this is a no-op.
"""

from __future__ import annotations

import contextlib
from typing import Any

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - optional dependency
    threadpool_limits = None

__all__ = ["single_blas_thread"]


def single_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """Context manager limiting BLAS/OpenMP pools to one thread (restored on exit)."""
    if threadpool_limits is None:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)
