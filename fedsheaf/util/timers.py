"""Per-phase wall-clock timers for the training loop (an optional instrument, off by default).

The decentralized loop wraps its phases in ``with self.timer("exchange"):``. By default
``timer`` is :data:`NULL_TIMER`, whose sections cost one method call and an empty
context manager. The benchmark swaps in a :class:`PhaseTimer` for a profiled epoch and
reads the totals back.

Sections may nest (the pilot forward pass happens inside the regulariser); each name
accumulates its own inclusive time, so nested names must not be summed with their
parents. The loop's names are flat: no name is timed inside another one.

On a GPU, kernels run asynchronously: a :class:`PhaseTimer` built with ``sync`` calls
it (e.g. ``torch.cuda.synchronize``) on entering and leaving each section so the time
lands in the right phase. That serialises the GPU, so profiled epochs are slower than
plain ones; the benchmark times plain epochs for its ratios and uses profiled ones only
to attribute time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

__all__ = ["NULL_TIMER", "NullTimer", "PhaseTimer"]


class NullTimer:
    """The default: every section is a no-op."""

    enabled = False
    _null = nullcontext()

    def __call__(self, name: str) -> AbstractContextManager[None]:
        return self._null


NULL_TIMER = NullTimer()


class PhaseTimer:
    """Accumulates seconds and entry counts per section name.

    Parameters
    ----------
    sync:
        Called on entering and leaving each section (e.g. ``torch.cuda.synchronize``);
        None on the CPU.
    clock:
        Monotonic clock in seconds (injectable for tests).
    """

    enabled = True

    def __init__(
        self,
        sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.sync, self.clock = sync, clock
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextmanager
    def _section(self, name: str) -> Iterator[None]:
        if self.sync is not None:
            self.sync()
        start = self.clock()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + (self.clock() - start)
            self.counts[name] = self.counts.get(name, 0) + 1

    def __call__(self, name: str) -> AbstractContextManager[None]:
        return self._section(name)

    def reset(self) -> None:
        self.seconds.clear()
        self.counts.clear()

    def totals(self) -> dict[str, float]:
        """Seconds per section since the last reset (a copy)."""
        return dict(self.seconds)
