"""The presets that travel with the package: the shipped configs/, graphs/ and slurm/.

An installed fedsheaf holds them as package data (``fedsheaf/_presets/``, copied there by
the build: setup.py); a checkout (an editable install) has them at the top of the
repository. :func:`preset_root` finds whichever there is.

A config argument that names no file, has no path separator and no ``.yaml`` suffix is a
preset's name: ``fedsheaf run quickstart`` reads ``configs/quickstart.yaml`` of the
presets (:func:`find_preset`). The input files a preset names (its ``graph``; a study's
``config``) resolve against the preset root, so a preset runs from any directory; what
names the user's files (``data.root``, ``output.dir``, the overrides) resolves against the
current directory, as in any config. A config given by path keeps its paths as written:
they resolve against the current directory.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsheaf.util.errors import ConfigError, relative_hint

#: The repository folders a build ships as presets (setup.py copies the same ones).
PRESET_FOLDERS = ("configs", "graphs", "slurm")
#: Where an installed package holds them.
PACKAGE_DATA = "_presets"
#: The keys of a run config that name a file shipped with its preset.
RUN_CONFIG_PATHS = ("graph",)
#: The keys of a study file that name a file shipped with its preset.
STUDY_PATHS = ("config",)
_SUFFIXES = (".yaml", ".yml")


def preset_root() -> Path | None:
    """The folder holding the presets' configs/ and graphs/: the installed package data,
    else the checkout this package runs from; None where there is neither."""
    package = Path(__file__).resolve().parents[1]
    installed = package / PACKAGE_DATA
    if (installed / "configs").is_dir():
        return installed
    checkout = package.parent  # a source checkout: the package beside setup.cfg
    if (checkout / "configs").is_dir() and (checkout / "setup.cfg").is_file():
        return checkout
    return None


def preset_names() -> list[str]:
    """The names of the preset configs (``quickstart``, ``mnist15``, …), sorted."""
    root = preset_root()
    if root is None:
        return []
    return sorted(p.stem for p in (root / "configs").glob("*.yaml") if p.is_file())


def is_name(text: str) -> bool:
    """Whether a config argument reads as a preset's name rather than a path: no path
    separator, no ``.yaml``/``.yml`` suffix, and no file or folder of that name here."""
    separators = {s for s in ("/", os.sep, os.altsep) if s is not None}
    return (
        bool(text)
        and not any(s in text for s in separators)
        and not text.endswith(_SUFFIXES)
        and not os.path.lexists(text)
    )


@dataclass(frozen=True)
class Preset:
    """A preset config: its name, its file, and the root its shipped paths resolve
    against."""

    name: str
    path: Path
    root: Path

    def rebase(
        self, raw: dict[str, Any], keys: tuple[str, ...] = RUN_CONFIG_PATHS
    ) -> dict[str, Any]:
        """``raw`` (the preset file's mapping) with the relative paths under ``keys``
        made paths under the preset root."""
        out = dict(raw)
        for key in keys:
            value = out.get(key)
            if isinstance(value, str) and value and not os.path.isabs(value):
                out[key] = str(self.root / value)
        return out


def lookup(text: str | os.PathLike[str]) -> Preset | None:
    """The preset ``text`` names; None where it is a path (:func:`is_name`) or names no
    preset."""
    text = os.fspath(text)
    root = preset_root()
    if not is_name(text) or root is None:
        return None
    path = root / "configs" / f"{text}.yaml"
    return Preset(text, path, root) if path.is_file() else None


def find_preset(text: str | os.PathLike[str], what: str = "config file") -> Preset | None:
    """The preset ``text`` names, or None where ``text`` is a path (:func:`is_name`).

    Raises :class:`ConfigError` for a name that is no preset (``what`` names the file in
    the message), naming the presets.
    """
    text = os.fspath(text)
    found = lookup(text)
    if found is not None or not is_name(text):
        return found
    names = preset_names()
    close = difflib.get_close_matches(text, names, n=1)
    guess = f" (did you mean '{close[0]}'?)" if close else ""
    listed = f"the presets: {', '.join(names)}" if names else "this installation has no presets"
    raise ConfigError(
        f"{what} {text} does not exist{relative_hint(text)} and no preset is named {text}"
        f"{guess}; {listed} (`fedsheaf init DIR` copies them for editing)"
    )
