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
