"""``fedsheaf graph``: build graph files and show them.

    fedsheaf graph build mnist15 [--density 0.4] [--out graphs/mnist15.yaml]
    fedsheaf graph build pair --dim 128 [--out graphs/pair.yaml]
    fedsheaf graph build pair --dims 64,128
    fedsheaf graph build class-overlap --classes "0,1,2;3,4" --dims 16,32 [--density 0.4]
    fedsheaf graph build ring|complete --dims 16,32,48 [--classes ...]
    fedsheaf graph build erdos-renyi --dims 16,32,48 --p 0.5 [--seed 0] [--classes ...]
    fedsheaf graph show FILE

The output defaults to ``graphs/<name>.yaml`` (name defaults to the kind). User
mistakes raise :class:`~fedsheaf.util.errors.GraphError`; the CLI prints them.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from fedsheaf import graphs
from fedsheaf.config import presets
from fedsheaf.config.sections import N_CLASSES, require_plain_name
from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError, GraphError, refuse_blocked_path
from fedsheaf.util.units import count

KINDS = ("mnist15", "pair", "class-overlap", "ring", "complete", "erdos-renyi")

# Options each kind accepts (besides --out and --name).
_ALLOWED: dict[str, frozenset[str]] = {
    "mnist15": frozenset({"density"}),
    "pair": frozenset({"dim", "dims", "classes"}),
    "class-overlap": frozenset({"classes", "dims", "density"}),
    "ring": frozenset({"dims", "classes"}),
    "complete": frozenset({"dims", "classes"}),
    "erdos-renyi": frozenset({"dims", "classes", "p", "seed"}),
}
_OPTIONS = ("density", "dim", "dims", "classes", "p", "seed")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``build`` and ``show`` subcommands to ``parser``."""
    parser.description = (
        "Build graph files (the agent graph of a decentralized run: one node per agent "
        "with its latent dimension, undirected edges, optional class sets) or print one. "
        "`fedsheaf graph build --help` lists the kinds and options; each kind accepts only "
        "the options that shape it."
    )
    sub = parser.add_subparsers(dest="graph_action", metavar="{build,show}", required=True)
    build = sub.add_parser(
        "build",
        help="build a graph file",
        description="Build a graph and write it as YAML (default graphs/<name>.yaml).",
    )
    build.add_argument("kind", choices=KINDS, help="graph family")
    build.add_argument("--out", help="output file (default graphs/<name>.yaml)")
    build.add_argument("--name", help="graph name (default: the kind)")
    build.add_argument(
        "--force",
        action="store_true",
        help="overwrite the output file when it holds a different or damaged graph "
        "(a file that is not a graph is never replaced)",
    )
    build.add_argument(
        "--density",
        type=float,
        help="target edge density for mnist15/class-overlap (default 0.4): a maximum-weight "
        "spanning tree first, then the heaviest other edges until reached, so at least "
        "2/N on N nodes (the density written is printed)",
    )
    build.add_argument("--dim", type=int, help="pair: Table-3 latent dimension (both agents)")
    build.add_argument("--dims", help="comma-separated latent dimension per node, e.g. 16,32,48")
    build.add_argument("--classes", help='per-node class sets, ";" between nodes, e.g. "0,1,2;3,4"')
    build.add_argument(
        "--p",
        type=float,
        help="erdos-renyi: edge probability; draws are repeated until one is connected, so "
        "a small p gives a denser graph than p (the density written is printed)",
    )
    build.add_argument("--seed", type=int, help="erdos-renyi: seed (default 0)")
    show = sub.add_parser("show", help="print a graph file", description="Print a graph file.")
    show.add_argument("file", help="graph YAML file")


def run(args: argparse.Namespace) -> int:
    """Execute ``fedsheaf graph ...``; returns the exit status."""
    if args.graph_action == "build":
        return _build(args)
    if args.graph_action == "show":
        print(describe(graphs.load_graph(args.file)))
        return 0
    raise GraphError(f"unknown graph action {args.graph_action!r}; use build or show")


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise GraphError(f"{option} {text!r} is not a comma-separated list of integers") from None


def _dims(args: argparse.Namespace) -> list[int]:
    if args.dims is None:
        if args.kind == "pair":
            raise GraphError("graph build pair: give --dim D (the Table-3 pair) or --dims D0,D1")
        raise GraphError(f"graph build {args.kind}: --dims is required (e.g. --dims 16,32,48)")
    dims = _ints(args.dims, "--dims")
    if not dims or any(d <= 0 for d in dims):
        raise GraphError(f"--dims {args.dims!r} must list positive integers")
    return dims


def _classes(args: argparse.Namespace, n: int) -> list[list[int]] | None:
    if args.classes is None:
        return None
    sets = [_ints(part, "--classes") for part in args.classes.split(";")]
    if len(sets) != n:
        raise GraphError(
            f"--classes {args.classes!r} gives {len(sets)} class sets but there are {n} nodes"
        )
    empty = [i for i, cs in enumerate(sets) if not cs]
    if empty:
        raise GraphError(
            f"--classes {args.classes!r}: node {empty[0]} has no classes (each node needs at "
            "least one, as each agent does)"
        )
    bad = sorted({c for cs in sets for c in cs if not 0 <= c < N_CLASSES})
    if bad:
        raise GraphError(
            f"--classes {args.classes!r}: class ids must be in 0..{N_CLASSES - 1} (the data "
            f"sets have {N_CLASSES} classes); got {', '.join(map(str, bad))}"
        )
    return sets


def _check_name(name: str) -> None:
    where = "the graph and its default file graphs/<name>.yaml"
    hint = "use --out to write elsewhere"
    require_plain_name(name, "--name", where, hint, GraphError, suffix=".yaml")


def build_from_args(args: argparse.Namespace) -> tuple[graphs.Graph, str]:
    """The graph ``args`` describe, and the canonical command that rebuilds it."""
    kind = args.kind
    for opt in _OPTIONS:
        if getattr(args, opt) is not None and opt not in _ALLOWED[kind]:
            raise GraphError(f"graph build {kind}: option --{opt} does not apply to {kind}")
    name = kind if args.name is None else args.name
    if args.name is not None:
        _check_name(name)
    cmd = [f"fedsheaf graph build {kind}"]
    if args.name is not None:
        cmd.append(f"--name {name}")
    density = 0.4 if args.density is None else args.density
    if kind == "mnist15":
        graph = presets.mnist15_graph(density)
        if args.name is not None:
            graph = graphs.Graph(name, graph.dims, graph.edges, graph.classes)
        cmd.append(f"--density {density}")
    elif kind == "pair" and args.dim is not None:
        if args.dims is not None or args.classes is not None:
            raise GraphError("graph build pair: give either --dim (Table 3) or --dims, not both")
        try:
            agents = presets.table3(args.dim)
        except ConfigError as e:
            raise GraphError(f"--dim {args.dim}: {e}") from None
        graph = graphs.pair([a.dim for a in agents], name=name, classes=[a.classes for a in agents])
        cmd.append(f"--dim {args.dim}")
    else:
        dims = _dims(args)
        classes = _classes(args, len(dims))
        cmd.append(f"--dims {','.join(map(str, dims))}")
        if kind == "class-overlap":
            if classes is None:
                raise GraphError(
                    'graph build class-overlap: --classes is required (e.g. "0,1;1,2")'
                )
            graph = graphs.class_overlap_graph(classes, dims, density=density, name=name)
            cmd.append(f"--density {density}")
        elif kind == "pair":
            graph = graphs.pair(dims, name=name, classes=classes)
        elif kind == "ring":
            graph = graphs.ring(dims, name=name, classes=classes)
        elif kind == "complete":
            graph = graphs.complete(dims, name=name, classes=classes)
        else:
            if args.p is None:
                raise GraphError("graph build erdos-renyi: --p is required (e.g. --p 0.5)")
            seed = 0 if args.seed is None else args.seed
            graph = graphs.erdos_renyi(dims, args.p, seed, name=name, classes=classes)
            cmd.append(f"--p {args.p} --seed {seed}")
        if classes is not None:
            cmd.append('--classes "' + ";".join(",".join(map(str, c)) for c in classes) + '"')
    return graph, " ".join(cmd)


#: A top-level ``nodes:`` or ``edges:`` line: what a damaged graph file still shows.
_GRAPH_LINE = re.compile(r"^(nodes|edges)\s*:", re.MULTILINE)


def _what(doc: object) -> str:
    """What a YAML document is, in words (for a file that is not a graph)."""
    if isinstance(doc, dict):
        keys = [str(k) for k in doc]
        listed = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
        return f"a YAML mapping with keys {listed}"
    if isinstance(doc, str):
        return "plain text"  # text without YAML structure reads as one string
    return "comments only" if doc is None else f"a YAML {type(doc).__name__}"


def _not_replaceable(path: Path) -> str | None:
    """Why ``graph build`` must not replace the existing file ``path``, even with
    ``--force``; None when it may: a graph file, a damaged one (invalid YAML in a
    .yaml/.yml file with a top-level ``nodes:`` or ``edges:`` line), or an empty file."""
    if not path.is_file():
        return "is not a regular file"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text, so not a graph file"
    if not text.strip():
        return None
    try:
        doc = yamlio.load(text)
    except (yaml.YAMLError, RecursionError, *yamlio.BAD_VALUE) as exc:
        if path.suffix in (".yaml", ".yml") and _GRAPH_LINE.search(text):
            return None
        return f"is neither valid YAML ({yamlio.problem(exc)}) nor a damaged graph file"
    if isinstance(doc, dict) and doc.keys() & {"nodes", "edges"}:
        if doc.keys() <= set(graphs.TOP_KEYS):
            return None
    return f"holds {_what(doc)}, not a graph (keys {', '.join(graphs.TOP_KEYS)})"


def _build(args: argparse.Namespace) -> int:
    graph, cmd = build_from_args(args)
    out = Path(args.out) if args.out else Path("graphs") / f"{graph.name}.yaml"
    refuse_blocked_path(out, "--out")
    if out.is_dir():
        raise GraphError(f"--out {out} is a directory; give the graph file's name")
    if out.exists():
        why = _not_replaceable(out)
        if why is not None:
            raise GraphError(
                f"{out} exists and {why}; it will not be replaced, even with --force: "
                "choose another --out"
            )
        try:
            same, held = graphs.load_graph(out) == graph, "holds a different graph"
        except GraphError:  # damaged or empty: --force may replace it
            same, held = False, "is a damaged or empty graph file"
        if same:
            print(f"{out} already holds this graph; left unchanged")
            return 0
        if not args.force:
            raise GraphError(
                f"{out} exists and {held} (runs may refer to it); "
                "pass --force to overwrite it or --out to write elsewhere"
            )
    graphs.save_graph(graph, out, comment=f"built by: {cmd}")
    edges = count(len(graph.edges), "edge")
    print(f"wrote {out}: {count(graph.n, 'node')}, {edges}, density {graph.density():.3f}")
    return 0


def describe(graph: graphs.Graph) -> str:
    """Human-readable summary: nodes, dims, degrees, oriented edges, density."""
    where = f" ({graph.source})" if graph.source else ""
    lines = [
        f"graph {graph.name}{where}",
        f"{count(graph.n, 'node')}, {count(len(graph.edges), 'edge')}, "
        f"density {graph.density():.3f}, "
        + ("connected" if graph.is_connected() else "DISCONNECTED"),
        "",
    ]
    rows = [("node", "dim", "degree", "heads N+", "tails N-", "classes")]
    for i in range(graph.n):
        rows.append(
            (
                str(i),
                str(graph.dims[i]),
                str(graph.degree(i)),
                ",".join(map(str, graph.heads(i))) or "-",
                ",".join(map(str, graph.tails(i))) or "-",
                ",".join(map(str, graph.classes[i])) if graph.classes is not None else "-",
            )
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        cells = [
            c.rjust(w) if k < 3 else c.ljust(w)
            for k, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines += ["", "edges (head <- tail):"]
    for h, t in graph.oriented_edges():
        dh, dt = graph.dims[h], graph.dims[t]
        note = ", tie: smaller id is head" if dh == dt else ""
        lines.append(f"  {h:>3} <- {t:<3}  (d {dh} <- {dt}{note})")
    return "\n".join(lines)
