"""What the program says to people: Python's :mod:`logging`, set up once for every module.

Every module logs with ``logger = get_logger(__name__)`` (a child of the ``fedsheaf``
logger); :func:`configure` decides what is shown:

* a record below WARNING (progress, notes: ``logger.info``; details: ``logger.debug``)
  goes to standard output, WARNING and above (``fedsheaf: warning: ...``, errors) to
  standard error;
* the message alone: the text carries its own ``fedsheaf: `` / ``fedsheaf: warning: ``;
* rank 0 of a job says INFO and above (DEBUG too with ``-v``; only warnings and errors
  with ``-q``); every other rank only warnings and errors, unless its caller has already
  chosen it as the one rank to say a line (``extra=CHOSEN``: the root of a hub run's
  agents, which is the job's rank 1).

The handlers look ``sys.stdout`` and ``sys.stderr`` up at each record (so that
``contextlib.redirect_stdout`` and pytest's capture see the output, as they would a
``print``) and flush after each record (``fedsheaf watch``, ``tail -f`` follow the lines
as they come). A write that fails (a reader gone: :class:`BrokenPipeError`) raises to the
caller as a ``print`` would, instead of logging's "--- Logging error ---" traceback.

Importing this module sets up the defaults (for the launcher's rank), so a program that
uses fedsheaf as a library sees the same lines as ``fedsheaf`` does; ``fedsheaf``'s
``-q``/``-v`` call :func:`configure` again.

What a command is asked for (``fedsheaf keys``'s listing, ``report``'s tables) is its
result, not a log record: the commands print it, so that ``-q`` never hides it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

#: The package's logger; every module's is a child of it.
ROOT = "fedsheaf"

#: ``extra=`` for an INFO record its caller has already limited to the one rank that says
#: it (:meth:`fedsheaf.runtime.world.World.log`): shown on that rank whatever its number.
CHOSEN = {"chosen_rank": True}

#: Environment variables in which MPI launchers and SLURM give a process its rank.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launched_rank() -> int:
    """This process's rank as its launcher told it (0 outside a launcher), without MPI."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (``__name__``), under the ``fedsheaf`` logger (a module
    run as ``__main__`` too)."""
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


class _StandardStream(logging.StreamHandler):
    """A handler writing to ``sys.<name>`` as it is at each record, flushed after each."""

    def __init__(self, name: str) -> None:
        self._which = name
        super().__init__()

    @property
    def stream(self) -> TextIO | None:
        return getattr(sys, self._which, None)

    @stream.setter
    def stream(self, value: TextIO | None) -> None:  # (StreamHandler.__init__ sets one)
        pass

    def emit(self, record: logging.LogRecord) -> None:
        stream = self.stream
        if stream is None:  # no such stream (closed with >&-, pythonw): as print does
            return
        stream.write(self.format(record) + self.terminator)  # errors raise, as print's do
        stream.flush()


class _RankFilter(logging.Filter):
    """On a rank other than 0: warnings and errors only, and lines the caller chose it
    to say (:data:`CHOSEN`)."""

    rank = 0

    def filter(self, record: logging.LogRecord) -> bool:
        return (
            self.rank == 0
            or record.levelno >= logging.WARNING
            or bool(getattr(record, "chosen_rank", False))
        )


class _Below(logging.Filter):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


_RANKS = _RankFilter()


def _install() -> logging.Logger:
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, _StandardStream) for h in logger.handlers):
        out, err = _StandardStream("stdout"), _StandardStream("stderr")
        out.addFilter(_Below(logging.WARNING))
        err.setLevel(logging.WARNING)
        for handler in (out, err):
            handler.setFormatter(logging.Formatter("%(message)s"))
            handler.addFilter(_RANKS)
            logger.addHandler(handler)
        # a program that sets up logging of its own does not get every line twice
        logger.propagate = False
    return logger


def level_for(verbosity: int) -> int:
    """The ``fedsheaf`` logger's level for ``verbosity`` (``-v``: 1, ``-q``: -1)."""
    if verbosity > 0:
        return logging.DEBUG
    return logging.INFO if verbosity == 0 else logging.WARNING


def configure(verbosity: int = 0, rank: int | None = None) -> None:
    """Show what ``verbosity`` asks for (0: progress and notes; 1, ``-v``: details too;
    -1, ``-q``: warnings and errors only) on ``rank`` (default: the launcher's,
    :func:`launched_rank`); handlers are installed once, later calls change the levels."""
    _install().setLevel(level_for(verbosity))
    _RANKS.rank = launched_rank() if rank is None else rank


configure()
