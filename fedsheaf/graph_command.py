"""``fedsheaf graph``: build graph files and show them.

    fedsheaf graph build mnist15 [--density 0.4] [--out graphs/mnist15.yaml]
    fedsheaf graph build pair --dim 128 [--out graphs/pair.yaml]
    fedsheaf graph build pair --dims 64,128
    fedsheaf graph build class-overlap --classes "0,1,2;3,4" --dims 16,32 [--density 0.4]
    fedsheaf graph build ring|complete --dims 16,32,48 [--classes ...]
    fedsheaf graph build erdos-renyi --dims 16,32,48 --p 0.5 [--seed 0] [--classes ...]
    fedsheaf graph show FILE

The output defaults to ``graphs/<name>.yaml`` (name defaults to the kind). User
mistakes raise :class:`~fedsheaf.errors.GraphError`; the CLI prints them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from fedsheaf import graphs, presets
from fedsheaf.errors import ConfigError, GraphError
from fedsheaf.units import count

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
        help="overwrite the output file when it holds a different graph",
    )
    build.add_argument(
        "--density", type=float, help="target edge density for mnist15/class-overlap (default 0.4)"
    )
    build.add_argument("--dim", type=int, help="pair: Table-3 latent dimension (both agents)")
    build.add_argument("--dims", help="comma-separated latent dimension per node, e.g. 16,32,48")
    build.add_argument("--classes", help='per-node class sets, ";" between nodes, e.g. "0,1,2;3,4"')
    build.add_argument("--p", type=float, help="erdos-renyi: edge probability")
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
    if any(c < 0 for cs in sets for c in cs):
        raise GraphError(f"--classes {args.classes!r}: classes must be non-negative")
    return sets


def build_from_args(args: argparse.Namespace) -> tuple[graphs.Graph, str]:
    """The graph ``args`` describe, and the canonical command that rebuilds it."""
    kind = args.kind
    for opt in _OPTIONS:
        if getattr(args, opt) is not None and opt not in _ALLOWED[kind]:
            raise GraphError(f"graph build {kind}: option --{opt} does not apply to {kind}")
    name = args.name or kind
    cmd = [f"fedsheaf graph build {kind}"]
    if args.name:
        cmd.append(f"--name {name}")
    density = 0.4 if args.density is None else args.density
    if kind == "mnist15":
        graph = presets.mnist15_graph(density)
        if args.name:
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


def _holds_other_yaml(path: Path) -> bool:
    """Whether ``path`` is a readable YAML mapping that is a run config (its keys, no
    graph ``nodes``), which ``graph build --force`` must not replace; a damaged graph
    file may be replaced."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    config_keys = {"algorithm", "agents", "train", "data", "sheaf", "federated", "graph"}
    return isinstance(raw, dict) and "nodes" not in raw and bool(config_keys & set(raw))


def _build(args: argparse.Namespace) -> int:
    graph, cmd = build_from_args(args)
    out = Path(args.out) if args.out else Path("graphs") / f"{graph.name}.yaml"
    if out.is_dir():
        raise GraphError(f"--out {out} is a directory; give the graph file's name")
    if out.exists():
        if _holds_other_yaml(out):
            raise GraphError(
                f"{out} exists and holds a run config, not a graph; --force does not "
                "overwrite it: choose another --out"
            )
        try:
            same = graphs.load_graph(out) == graph
        except GraphError:  # a damaged graph file: --force may replace it
            same = False
        if same:
            print(f"{out} already holds this graph; left unchanged")
            return 0
        if not args.force:
            raise GraphError(
                f"{out} exists and holds a different graph (runs may refer to it); "
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
