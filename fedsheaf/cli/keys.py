"""``fedsheaf keys [PREFIX]``: every config key with its type, default, range and meaning."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from fedsheaf.config.schema import KeyDoc, describe
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.util.errors import ConfigError


def format_keys(rows: list[KeyDoc]) -> str:
    """One line per key (``key  type  default  allowed``), its doc indented below."""
    widths = [max(len(getattr(r, f)) for r in rows) for f in ("key", "type", "default")]
    lines = []
    for r in rows:
        cells = [r.key.ljust(widths[0]), r.type.ljust(widths[1]), r.default.ljust(widths[2])]
        lines.append("  ".join([*cells, r.allowed]).rstrip())
        if r.doc:
            lines.append(f"    {r.doc}")
    return "\n".join(lines)


def keys(prefix: str = "", out: TextIO | None = None) -> int:
    """Print the keys starting with ``prefix`` (all of them when empty)."""
    prefix = re.sub(r"\[\d+\]", "[i]", prefix)  # agents[0].lr is listed as agents[i].lr
    rows = [r for r in describe(ExperimentConfig) if r.key.startswith(prefix)]
    if not rows:
        sections = sorted({r.key.split(".")[0].split("[")[0] for r in describe(ExperimentConfig)})
        raise ConfigError(f"no config key starts with '{prefix}'; sections: {', '.join(sections)}")
    print(format_keys(rows), file=out or sys.stdout)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the experiment config keys (dotted, as overrides take them: train.lr=0.05) "
        "with type, default, allowed values and meaning."
    )
    parser.add_argument("prefix", nargs="?", default="", help="only keys starting with this")


def run(args: argparse.Namespace) -> int:
    return keys(args.prefix)
