"""The package's folders are its layers: imports only go down, and never in a circle.

Read from the source (no module is imported): every ``import fedsheaf...`` and
``from fedsheaf... import ...`` anywhere in a module, inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fedsheaf"

#: Each layer, lowest first, with the top-level names of ``fedsheaf`` that make it up.
#: A module may import its own layer and the layers below it, nothing above.
LAYERS: list[tuple[str, set[str]]] = [
    ("util", {"util"}),
    ("graph files", {"graphs"}),
    ("config", {"config"}),
    ("core", {"data", "models", "sheaf", "theory", "algorithms", "runtime"}),
    ("run directory", {"rundir"}),
    ("job drivers", {"launch"}),
    ("operations tooling", {"ops"}),
    ("commands", {"cli", "__main__"}),
]
#: The package's face: the version, and the public API over the layers (fedsheaf.api).
FACE = {"__init__", "api"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The fedsheaf modules (or packages) ``path`` imports, as dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "fedsheaf")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "fedsheaf":
                continue
            for alias in node.names:  # `from fedsheaf.x import y`: y may be a module
                sub = f"{module}.{alias.name}"
                found.add(sub if _exists(sub) else module)
    return found


def _exists(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        graph[_module_name(path)] = {m for m in _imports(path) if m != _module_name(path)}
    return graph


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package itself (its face)
    top = parts[1]
    for i, (_, names) in enumerate(LAYERS):
        if top in names:
            return i
    return None


def test_every_module_belongs_to_a_layer() -> None:
    loose = [
        m
        for m in _graph()
        if _layer(m) is None and m.split(".")[-1] not in FACE and m != "fedsheaf"
    ]
    assert loose == [], f"modules outside every layer (add them to LAYERS or move them): {loose}"


def test_no_import_goes_up_a_layer() -> None:
    upward = []
    for module, deps in _graph().items():
        mine = _layer(module)
        for dep in deps:
            theirs = _layer(dep)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{module} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]})")
    assert upward == [], "\n".join(upward)


def test_util_imports_nothing_of_fedsheaf_but_util() -> None:
    graph = _graph()
    leaks = [
        f"{m} imports {d}"
        for m, deps in graph.items()
        if _layer(m) == 0
        for d in deps
        if _layer(d) != 0
    ]
    assert leaks == [], leaks


def test_no_import_circles() -> None:
    graph = _graph()
    # a package's __init__ importing its own modules is its face, not a circle
    edges = {
        m: {d for d in deps if d in graph and not m.startswith(d + ".")}
        for m, deps in graph.items()
    }
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                circles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert circles == [], "\n".join(" -> ".join(c) for c in circles)


def test_mpi_is_imported_only_by_the_runtime() -> None:
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] == "mpi4py" for n in names):
                importers.append(_module_name(path))
    outside = sorted({m for m in importers if not m.startswith("fedsheaf.runtime.")})
    assert importers and outside == [], f"mpi4py imported outside fedsheaf/runtime/: {outside}"


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The layer rule is live: a core module importing the run directory is caught."""
    mine, theirs = _layer("fedsheaf.algorithms.base"), _layer("fedsheaf.rundir.checkpoint")
    assert mine is not None and theirs is not None and theirs > mine
