"""What a rank's main thread tells its step watchdog (:mod:`fedsheaf.runtime.watchdog`):
when it last made progress and whether it is waiting for other ranks now. Without MPI,
so that the training loops may beat (:func:`beat`) wherever they run.

A rank makes progress when it finishes a training step (:func:`beat`) or a communication
of the runtime (:func:`waiting` marks the wait and beats at its end).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Progress:
    """Plain attributes, written by the main thread and read by the watchdog thread (the
    GIL keeps each write whole)."""

    def __init__(self) -> None:
        #: When this rank last made progress (``time.monotonic()``).
        self.beat = time.monotonic()
        #: Greater than 0 while the main thread waits in a communication.
        self.depth = 0
        #: Whether a lack of progress counts (training has begun: :func:`arm`).
        self.armed = False


PROGRESS = Progress()


def beat() -> None:
    """This rank has made progress (a training step finished)."""
    PROGRESS.beat = time.monotonic()


@contextmanager
def waiting() -> Iterator[None]:
    """Mark a wait for other ranks (a communication); its end is progress."""
    PROGRESS.depth += 1
    try:
        yield
    finally:
        PROGRESS.depth -= 1
        PROGRESS.beat = time.monotonic()


def arm() -> None:
    """Training has begun: from now on no progress for the step timeout is a fault."""
    PROGRESS.beat = time.monotonic()
    PROGRESS.armed = True


def disarm() -> None:
    """This rank's training is over (or it leaves on purpose)."""
    PROGRESS.armed = False
