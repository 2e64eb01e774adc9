"""Build hook: setup.cfg holds the package's metadata; this adds the presets.

The repository's configs/, graphs/ and slurm/ folders stay where they are; a build copies
them into the package as ``fedsheaf/_presets/`` (package data), so that an installed
fedsheaf runs ``fedsheaf run quickstart`` and ``fedsheaf init DIR`` copies them
(:mod:`fedsheaf.config.bundled`). An editable install reads them from the checkout.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
#: The folders that travel with the package (fedsheaf.config.bundled.PRESET_FOLDERS).
PRESET_FOLDERS = ("configs", "graphs", "slurm")
PACKAGE_DATA = Path("fedsheaf", "_presets")


class BuildWithPresets(build_py):
    """build_py, then the preset folders copied into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install finds them in the checkout
        for name in PRESET_FOLDERS:
            for src in sorted((HERE / name).rglob("*")):
                if not src.is_file() or "__pycache__" in src.parts:
                    continue
                target = Path(self.build_lib) / PACKAGE_DATA / src.relative_to(HERE)
                self.mkpath(str(target.parent))
                self.copy_file(str(src), str(target))  # keeps the mode (sbatch: executable)


setup(cmdclass={"build_py": BuildWithPresets})
