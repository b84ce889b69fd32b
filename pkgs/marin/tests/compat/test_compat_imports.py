"""Tests import the engine's real modules, not the modules at Marin's old paths (which exist for
Marin's files): a test imports one only when it is about it."""

from __future__ import annotations

import ast
from pathlib import Path

SHIMS = {"marin.execution.executor", "marin.execution.step", "marin.execution.lazy",
         "marin.execution.step_runner", "marin.execution.artifact", "marin.execution.artifact_step"}
ABOUT_THE_SHIMS = {
    "test_marin_executor.py": "Marin's executor API at Marin's path",
    "test_marin_training_files.py": "Marin's tutorials, importing as they do",
    "test_seed_example.py": "the design's seed example, as written",
    "test_hashing.py": "kept as it is: it pins the digests",
}


def test_tests_import_the_engines_real_modules_not_the_modules_at_marins_old_paths():
    root = Path(__file__).resolve().parents[4]
    found = []
    for path in sorted([*root.glob("pkgs/*/tests/**/*.py"), *root.glob("tests/**/*.py")]):
        if path.name in ABOUT_THE_SHIMS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n in SHIMS]
    assert found == []
