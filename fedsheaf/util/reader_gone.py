"""Standard output that outlives its reader.

A run's progress lines are a courtesy; its results go to its run directory. When the
reader of standard output goes away (``fedsheaf run ... | head``, a ``tee`` that was
killed), the next write raises :class:`BrokenPipeError`, which on
one rank of a job would abort a run of hours. :func:`install` wraps ``sys.stdout`` so
that the first such write says so once on standard error and sends the rest of the
output to the null device instead.

An I/O error (EIO) is another matter: a terminal, or the launcher that relays the ranks'
output, has gone (``mpiexec`` killed outright); the ranks are about to be killed with it.
It ends the job with :class:`OutputGone`, whose words say so, rather than as an OSError
that reads like a failing disk.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO

from fedsheaf.util.errors import FedsheafError

NOTICE = (
    "fedsheaf: standard output's reader has gone (broken pipe); the run goes on without "
    "progress lines, its records go to its run directory as always"
)


class OutputGone(FedsheafError):
    """Standard output failed with EIO: the process that reads it has gone."""

    def __init__(self) -> None:
        super().__init__(
            "standard output failed with an I/O error: its terminal or the launcher that "
            "relays it (mpiexec, srun) has gone, killed or hung up; the run directory keeps "
            "what the run wrote up to then"
        )


class ReaderGoneGuard:
    """A text stream that swaps ``stream`` for the null device once its reader has gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)
        except OSError as exc:
            _raise_if_gone(exc)
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
        except OSError as exc:
            _raise_if_gone(exc)
            raise

    def _gone(self) -> None:
        if self.reader_gone:
            return
        self.reader_gone = True
        sink = open(os.devnull, "w", encoding="utf-8")  # kept open for the rest of the process
        try:  # the interpreter's last flush of the original stream then writes nowhere
            os.dup2(sink.fileno(), self._stream.fileno())
        except (OSError, ValueError):
            pass
        self._stream = sink
        try:  # print, not logging: this runs inside a write to stdout, maybe a log handler's
            print(NOTICE, file=sys.stderr, flush=True)
        except OSError:  # stderr went with it (2>&1 | head)
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _raise_if_gone(exc: OSError) -> None:
    if exc.errno == errno.EIO:
        raise OutputGone() from None


def install() -> None:
    """Guard ``sys.stdout`` (idempotent; nothing to guard when it is closed, ``>&-``)."""
    if sys.stdout is not None and not isinstance(sys.stdout, ReaderGoneGuard):
        sys.stdout = ReaderGoneGuard(sys.stdout)
