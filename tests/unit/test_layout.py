"""The tree reads as the architecture: CONTRIBUTING.md's map is the tree, the top of the package
stays small, no module outgrows a screenful of screens, and no two modules import each other
(counting imports inside functions and under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PKG = ROOT / "src" / "emq"
MAX_LINES = 400
MAX_TOP_MODULES = 8


def _modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every emq module ``name`` imports, its own parent packages left out (importing a
    submodule runs its package first; that is not an edge of the graph)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            targets = subs if len(subs) == len(node.names) else [base, *subs]
        else:
            continue
        out.update(t for t in targets if t in modules and not name.startswith(t + "."))
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_contributor_map_is_the_tree() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("<!-- packages -->")[1].split("<!-- /packages -->")[0]
    mapped = re.findall(r"^- `([\w.]+)/?`:", block, re.M)
    packages = [p.name for p in PKG.iterdir() if (p / "__init__.py").exists()]
    modules = [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"]
    on_disk = sorted(packages + modules)
    assert sorted(mapped) == on_disk, "CONTRIBUTING.md's map and src/emq differ"


def test_the_top_of_the_package_is_small() -> None:
    top = [p for p in PKG.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= MAX_TOP_MODULES, sorted(p.name for p in top)


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(PKG)): n
        for p in PKG.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []
