"""The step store's modules import each other without a cycle, counting every import: at the top,
inside a function, and under ``if TYPE_CHECKING:`` (which import-linter's contracts leave out).

``store.py`` and ``done_index.py`` once imported each other (one through an import in a function);
the listings both read through now lie below both (``store/listings.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "pkgs/marin/src/marin/execution/store"
PACKAGE = "marin.execution.store"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of the store that ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:
                found |= {a.name for a in node.names if a.name in modules}
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[3])
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path.name}: a relative import (the store's modules import by full name)")
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[3] for a in node.names if a.name.startswith(PACKAGE + ".")}
    return found & modules


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, as the modules on it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _graph() -> dict[str, set[str]]:
    modules = {p.stem for p in STORE.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(STORE / f"{m}.py", modules) - {m} for m in modules}


def test_the_store_package_has_no_import_cycle_type_only_and_in_function_imports_included():
    graph = _graph()
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])
    assert "listings" in graph["done_index"] and "done_index" not in graph["store"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
