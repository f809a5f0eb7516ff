"""The import graph of this repository's packages, read from their source with ``ast``.

Two users: tests/test_import_cycles.py (no cycle in the shipped and generator packages) and
tests/conftest.py (a test module that reaches the release fetcher is an ``oracle`` test).

Every ``import`` counts, at module level, inside a function (a lazy import that dodges a cycle
at run time still ties the two modules together) and under ``if TYPE_CHECKING:`` (a type-only
import is still a dependency a reader follows). ``from pkg import name`` depends on
``pkg.name`` when that is a module (a ``.py`` file, or a compiled extension known by its
``.pyi`` stub), else on ``pkg`` itself. Importing a submodule also runs its parent package's
``__init__``; that edge is not counted (a package re-exporting its own submodules is not a
cycle anyone can open). A compiled extension is a leaf: its stub's imports only type the
signatures of a module that imports nothing of the package when it loads.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def modules(packages: tuple[str, ...], root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``packages`` (stubs included)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join(parts), path)
    return found


def _imports(name: str, path: Path, known: dict[str, Path], run_targets: bool) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its source; with
    ``run_targets`` also those it names whole in a string (``python -m tests.x`` runs one)."""
    is_package = path.stem == "__init__"
    out: set[str] = set()

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif run_targets and isinstance(node, ast.Constant) and node.value in known:
            targets = [node.value]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            module = owner(target)
            if module is not None and module != name:
                out.add(module)
    return out


def import_graph(
    packages: tuple[str, ...], root: Path = REPO, *, run_targets: bool = False
) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (and, with ``run_targets``, runs)."""
    known = modules(packages, root)
    return {
        name: set() if path.suffix == ".pyi" else _imports(name, path, known, run_targets)
        for name, path in known.items()
    }


def reaching(graph: dict[str, set[str]], target: str) -> set[str]:
    """The modules that import ``target`` directly or through others (``target`` included)."""
    importers: dict[str, set[str]] = {}
    for module, imported in graph.items():
        for other in imported:
            importers.setdefault(other, set()).add(module)
    found, todo = {target}, [target]
    while todo:
        for module in importers.get(todo.pop(), ()):
            if module not in found:
                found.add(module)
                todo.append(module)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found
