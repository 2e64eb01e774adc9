"""The docs stay true to the code: every module and function docs/ARCHITECTURE.md names
exists, every relative link resolves, the key reference is what the schema generates,
and the README stays short."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest

from fedsheaf.cli.keys import keys

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fedsheaf"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _expand(name: str) -> list[str]:
    """``a/{b,c}.py`` → ``a/b.py``, ``a/c.py``."""
    m = re.search(r"\{([^}]*)\}", name)
    if not m:
        return [name]
    return [n for alt in m.group(1).split(",") for n in _expand(name.replace(m.group(0), alt, 1))]


def _defined(path: Path, dotted: str) -> bool:
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    for part in dotted.split("."):
        found = [
            n
            for n in body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == part
        ]
        if not found:
            return False
        node = found[0]
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def _named_in_architecture() -> list[str]:
    return [
        n
        for quoted in re.findall(r"`([^`]+)`", ARCHITECTURE.read_text())
        for n in _expand(quoted)
        if re.fullmatch(r"[\w/]+(\.py(:[\w.]+)?|/)", n)
    ]


def test_architecture_names_only_modules_and_functions_that_exist() -> None:
    names = _named_in_architecture()
    assert len(names) > 60  # the module map is there
    missing = []
    for name in names:
        path_text, _, symbol = name.partition(":")
        top = REPO if path_text.split("/")[0] in ("fedsheaf", "tests", "docs") else PACKAGE
        path = top / path_text
        if not path.exists():
            missing.append(name)
        elif symbol and not _defined(path, symbol):
            missing.append(name)
    assert missing == [], f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_architecture_maps_every_module() -> None:
    named = {n.partition(":")[0] for n in _named_in_architecture()}
    folders = {n for n in named if n.endswith("/")}
    unmapped = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
        and str(p.relative_to(PACKAGE)) not in named
        and not any(str(p.relative_to(PACKAGE)).startswith(f) for f in folders)
    ]
    assert unmapped == [], f"modules missing from docs/ARCHITECTURE.md's map: {unmapped}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{doc.name}: links to nothing: {broken}"


def test_key_reference_is_what_the_schema_generates() -> None:
    out = io.StringIO()
    keys(out=out, markdown=True)
    page = REPO / "docs" / "reference" / "config-keys.md"
    assert page.read_text() == out.getvalue(), (
        "docs/reference/config-keys.md is stale: run "
        "`fedsheaf keys --markdown > docs/reference/config-keys.md`"
    )


def test_readme_is_short_and_names_the_test_command() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "run/test.sh" in text and "run/quickstart.sh" in text
