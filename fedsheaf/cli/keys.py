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


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def markdown_keys(rows: list[KeyDoc]) -> str:
    """The key reference as a Markdown page, one table per config section
    (``docs/reference/config-keys.md`` is this page; a test keeps it current)."""
    lines = [
        "# Config key reference",
        "",
        "Generated from the config schema by `fedsheaf keys --markdown`; do not edit by hand.",
        "Every key can be set in a config file or overridden on the command line",
        "(`fedsheaf run CONFIG train.lr=0.05`). Guide: [configuration](../configuration.md).",
    ]
    section = None
    for r in rows:
        top = r.key.split(".")[0].split("[")[0] if "." in r.key else ""
        if top != section:
            section = top
            title = f"`{top}`" if top else "Top level"
            lines += ["", f"## {title}", "", "| key | type | default | allowed | meaning |"]
            lines.append("|---|---|---|---|---|")
        cells = [f"`{r.key}`", r.type, f"`{r.default}`" if r.default else "", r.allowed, r.doc]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def keys(prefix: str = "", out: TextIO | None = None, markdown: bool = False) -> int:
    """Print the keys starting with ``prefix`` (all of them when empty), as text or as
    the Markdown reference page."""
    prefix = re.sub(r"\[\d+\]", "[i]", prefix)  # agents[0].lr is listed as agents[i].lr
    rows = [r for r in describe(ExperimentConfig) if r.key.startswith(prefix)]
    if not rows:
        sections = sorted({r.key.split(".")[0].split("[")[0] for r in describe(ExperimentConfig)})
        raise ConfigError(f"no config key starts with '{prefix}'; sections: {', '.join(sections)}")
    if markdown:
        (out or sys.stdout).write(markdown_keys(rows))
    else:
        print(format_keys(rows), file=out or sys.stdout)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the experiment config keys (dotted, as overrides take them: train.lr=0.05) "
        "with type, default, allowed values and meaning."
    )
    parser.add_argument("prefix", nargs="?", default="", help="only keys starting with this")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the reference page (docs/reference/config-keys.md) instead",
    )


def run(args: argparse.Namespace) -> int:
    return keys(args.prefix, markdown=args.markdown)
