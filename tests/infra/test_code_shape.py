"""The size limits the project keeps its code to: no function over 80 lines and no module over 400
lines in the libraries (``pkgs/*/src``). A longer one is split by idea (see DESIGN.md's conventions)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400


def _sources() -> list[Path]:
    found = sorted(ROOT.glob("pkgs/*/src/**/*.py"))
    assert found, "no library source found"
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_module_is_longer_than_400_lines() -> None:
    long = [f"{path.relative_to(ROOT)} ({n} lines)" for path in _sources()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == []
