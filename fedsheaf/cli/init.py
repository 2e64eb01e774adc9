"""``fedsheaf init DIR``: copy the presets (configs/, graphs/, slurm/) into DIR for editing.

The copies are the user's: run from DIR, their relative paths (``graph:
graphs/quick4.yaml``) resolve against DIR, as for any config given by path. A folder
with files is refused unless ``--force``; a preset file that DIR already has, with other
contents, is then replaced and named, never silently.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
from pathlib import Path
from typing import IO

from fedsheaf.config.bundled import PRESET_FOLDERS, preset_root
from fedsheaf.util.atomic import write_atomic
from fedsheaf.util.errors import ConfigError, refuse_blocked_path
from fedsheaf.util.log import get_logger
from fedsheaf.util.units import count

logger = get_logger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Copy the shipped presets (configs/, graphs/, slurm/) into DIR, to edit them and "
        "run them from DIR. `fedsheaf run NAME` (e.g. quickstart) runs a preset unedited, "
        "from any directory."
    )
    parser.add_argument("dir", metavar="DIR", help="the folder to copy them into (new or empty)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="copy into a folder that has files: its other files are kept; a preset file "
        "it already has with other contents is replaced, and named",
    )


def preset_files(root: Path) -> list[Path]:
    """The preset files under ``root``, relative to it, sorted."""
    return [
        p.relative_to(root)
        for name in PRESET_FOLDERS
        for p in sorted((root / name).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


def copy_presets(target: Path, force: bool = False) -> tuple[list[Path], list[Path], list[Path]]:
    """Copy the presets into ``target``; returns (relative paths) the files written, those
    of them that replaced a file with other contents, and those already there unchanged.

    Raises :class:`ConfigError` when there are no presets, when ``target`` is not a
    folder, or when it has files and ``force`` is not set.
    """
    root = preset_root()
    if root is None:
        raise ConfigError(
            "this installation of fedsheaf has no presets (fedsheaf/_presets); reinstall it "
            "from a wheel or a checkout"
        )
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} is not a directory")
    refuse_blocked_path(target, "fedsheaf init")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ConfigError(
            f"{target} is not empty; give a new or empty folder, or --force to add the "
            "presets beside its files (a preset file it already has is then replaced)"
        )
    files = preset_files(root)
    for rel in files:  # before writing anything: a folder where a file goes
        if (target / rel).is_dir():
            raise ConfigError(f"{target / rel} is a directory; fedsheaf init writes a file there")
    written: list[Path] = []
    replaced: list[Path] = []
    unchanged: list[Path] = []
    for rel in files:
        src, dst = root / rel, target / rel
        data = src.read_bytes()
        if dst.is_file():
            if dst.read_bytes() == data:
                unchanged.append(rel)
                continue
            replaced.append(rel)

        def write(fh: IO[bytes], data: bytes = data) -> None:
            fh.write(data)

        write_atomic(dst, write)
        shutil.copymode(src, dst)  # the sbatch scripts stay executable
        written.append(rel)
    return written, replaced, unchanged


def run(args: argparse.Namespace) -> int:
    target = Path(args.dir)
    written, replaced, unchanged = copy_presets(target, args.force)
    for rel in replaced:
        logger.warning(f"fedsheaf: warning: replaced {target / rel} (it differed from the preset)")
    per_folder = {name: sum(1 for r in written if r.parts[0] == name) for name in PRESET_FOLDERS}
    what = ", ".join(f"{name}/ ({n})" for name, n in per_folder.items() if n)
    what = f": {what}" if what else ""
    same = f"; {count(len(unchanged), 'file')} already there, unchanged" if unchanged else ""
    print(f"fedsheaf init: copied {count(len(written), 'file')} into {target}{what}{same}")
    print(
        "next, from there (the configs' relative paths resolve against the current "
        "directory):\n"
        f"  cd {shlex.quote(str(target))}\n"
        "  mpiexec -n 4 fedsheaf run configs/quickstart.yaml  # digits: no download\n"
        "  fedsheaf check -n 15 configs/mnist15.yaml data.root=/path/to/data\n"
        "  sbatch slurm/study15.sbatch  # its header says how"
    )
    return 0
