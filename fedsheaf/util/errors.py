"""User-facing errors.

Every error a user can cause (bad config, bad graph file, wrong rank count,
missing data) is raised as a :class:`FedsheafError` subclass. The CLI and the
MPI runtime print these as one readable line and exit with status 2, without a
traceback; any other exception is a bug and aborts the whole MPI job.
"""

import os
from pathlib import Path


class FedsheafError(Exception):
    """Base class of errors caused by user input."""


class ConfigError(FedsheafError):
    """An experiment configuration is malformed or out of range."""


class GraphError(FedsheafError):
    """A graph file or graph object is invalid for the requested run."""


class DataError(FedsheafError):
    """A data set is missing, malformed or cannot be partitioned as asked."""


class WriteError(FedsheafError, OSError):
    """A file that could not be written: a full disk, a quota, a read-only file system.

    An OSError too, so that code which carries on when a courtesy file cannot be written
    (``except OSError``) still does; its words name the file and the reason, which a
    failed ``torch.save`` hides behind a C++ message (``unexpected pos 4079 vs 4049``).
    """

    def __init__(self, path: str | os.PathLike[str], cause: BaseException) -> None:
        found = os_error(cause)
        reason = (found.strerror or str(found)) if found is not None else str(cause)
        self.message = f"cannot write {path}: {reason}"
        super().__init__(found.errno if found is not None else None, self.message)

    def __str__(self) -> str:
        return self.message


def os_error(exc: BaseException | None) -> OSError | None:
    """The first OSError in ``exc`` and the exceptions it was raised from or during."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def relative_hint(path: str | os.PathLike[str]) -> str:
    """`` (relative to the current directory X)`` for a relative path, else ``""``.

    Config files hold paths as given (``graphs/quick4.yaml``, ``data``), which resolve
    against the directory a run is started (or resumed) from.
    """
    if os.path.isabs(path):
        return ""
    return f" (relative to the current directory {os.getcwd()})"


def refuse_blocked_path(path: str | os.PathLike[str], what: str) -> None:
    """Refuse an output ``path`` whose nearest existing ancestor is not a directory
    (``--out notes.txt/graph.yaml``): said before anything is written, not as the bare
    ``File exists`` or ``Not a directory`` that creating it would raise."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} {path}: {parent} is a file, not a directory")
            return


class CheckpointError(FedsheafError):
    """A checkpoint cannot be used to resume (unreadable, or from another setup)."""
