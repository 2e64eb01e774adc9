"""``fedsheaf keys [PREFIX]``: every config key with its type, default, range and meaning,
then every registry of plug-ins (:func:`plugin_registries`): the key that names one, its
entry-point group, the built-in names and the plug-ins installed here."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from fedsheaf.config.schema import KeyDoc, describe
from fedsheaf.config.sections import ExperimentConfig
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.registry import Registry


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


def plugin_registries() -> list[tuple[Registry, str]]:
    """Every registry of plug-ins, with what its factories are, in words: the one list
    that ``fedsheaf keys`` and ``fedsheaf check`` read. (Imported here, not at the top:
    they import torch.)"""
    from fedsheaf.algorithms import ALGORITHMS_REGISTRY
    from fedsheaf.algorithms.federated.aggregators import AGGREGATORS
    from fedsheaf.data.datasets_registry import DATASETS
    from fedsheaf.data.partitions_registry import GRAPH_PARTITIONS, SERVER_PARTITIONS
    from fedsheaf.models.registry import AGENT_MODELS, SERVER_MODELS

    return [
        (DATASETS, "load(root, split, download, **args) -> (x, y) | (x, y, n_classes) | Dataset"),
        (AGENT_MODELS, "fn(input_shape, n_classes, **args) -> module with encode, decode"),
        (SERVER_MODELS, "fn(input_shape, n_classes, **args) -> module with representation, HEAD"),
        (GRAPH_PARTITIONS, "fn(labels, n_parties, seed=..., **args) -> index arrays (graph runs)"),
        (
            SERVER_PARTITIONS,
            "fn(labels, n_parties, seed=..., **args) -> index arrays (server runs)",
        ),
        (
            ALGORITHMS_REGISTRY,
            "fn(agent, nbr, reporter, **args) -> DecentralizedAlgorithm (decentralized runs; "
            "fedproto, fedmuscle and the server-based methods are built-in names only)",
        ),
        (
            AGGREGATORS,
            "fn(**args) -> object with aggregate(global_params, updates, counts, round_)",
        ),
    ]


def _matches(registry: Registry, prefix: str) -> bool:
    return not prefix or any(k.startswith(prefix) for k in (registry.key, registry.args_key))


def format_registries(rows: list[tuple[Registry, str]]) -> str:
    """The plain listing: per registry its key, arguments key, entry-point group, what a
    factory is, the built-in names and the installed plug-ins (name -> entry point)."""
    lines = [
        "Plug-ins: each key below takes a built-in name, an installed plug-in's name (an entry",
        "point of its group) or 'package.module:callable', with keyword arguments in its",
        "arguments key.",
    ]
    for reg, what in rows:
        installed = reg.installed()
        found = ", ".join(f"{n} -> {installed[n].value}" for n in sorted(installed)) or "none"
        lines += [
            "",
            f"{reg.kind}: {reg.key}, arguments {reg.args_key}, entry-point group {reg.group}",
            f"    {what}",
            f"    built-in: {', '.join(reg.builtin)}",
            f"    installed: {found}",
        ]
    return "\n".join(lines)


def markdown_registries(rows: list[tuple[Registry, str]]) -> str:
    """The registries as a Markdown table; installed plug-ins are left out (the page must
    not depend on what is installed where it is generated)."""
    lines = [
        "",
        "## Plug-ins",
        "",
        "Each of these keys takes a built-in name, an installed plug-in's name (an entry point",
        "of its group) or `package.module:callable`, with keyword arguments in its arguments",
        "key. `fedsheaf keys` (without `--markdown`) also lists the plug-ins installed where it",
        "runs; this page does not. Guide: [extending](../extending.md).",
        "",
        "| kind | config key | arguments | entry-point group | built-in | factory |",
        "|---|---|---|---|---|---|",
    ]
    for reg, what in rows:
        cells = [
            reg.kind,
            f"`{reg.key}`",
            f"`{reg.args_key}`",
            f"`{reg.group}`",
            ", ".join(f"`{n}`" for n in reg.builtin),
            what,
        ]
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
    registries = [r for r in plugin_registries() if _matches(r[0], prefix)]
    if markdown:
        page = markdown_keys(rows) + (markdown_registries(registries) if registries else "")
        (out or sys.stdout).write(page)
    else:
        print(format_keys(rows), file=out or sys.stdout)
        if registries:
            print("\n" + format_registries(registries), file=out or sys.stdout)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the experiment config keys (dotted, as overrides take them: train.lr=0.05) "
        "with type, default, allowed values and meaning; then the plug-in registries (data "
        "sets, models, partitions, algorithms, aggregators): the key naming one, its "
        "entry-point group, the built-in names and the plug-ins installed here."
    )
    parser.add_argument("prefix", nargs="?", default="", help="only keys starting with this")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the reference page (docs/reference/config-keys.md) instead",
    )


def run(args: argparse.Namespace) -> int:
    return keys(args.prefix, markdown=args.markdown)
