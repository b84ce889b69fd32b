"""The workspace root: the nearest folder above a start whose ``pyproject.toml`` declares a uv
workspace, found by walking up (:func:`find_workspace_root`).

One command asks it several times from the same folders (its configuration, its targets' module
names, its GC root's id). :func:`fixed_workspace_roots` lets a command walk up from each folder once:
within it an answer is kept, by start folder as given, until the command ends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["find_workspace_root", "fixed_workspace_roots"]

_kept: dict[str, Path | None] | None = None
"""The answers kept while :func:`fixed_workspace_roots` holds, by start folder; None outside it."""


@contextlib.contextmanager
def fixed_workspace_roots() -> Iterator[None]:
    """Within: :func:`find_workspace_root` walks up from each start folder once and answers again
    from what it found. For one command (``marin``'s verbs): the workspace's files do not move
    while it runs. Outside it (between commands of a long-lived process: a test worker, a warm
    worker) every call walks up again, so a ``pyproject.toml`` added or edited meanwhile is seen."""
    global _kept
    outer = _kept
    _kept = {} if outer is None else outer
    try:
        yield
    finally:
        _kept = outer


def find_workspace_root(start: str | os.PathLike | None = None) -> Path | None:
    """Walk up from ``start`` (default: the working folder) to the nearest folder whose
    ``pyproject.toml`` declares a uv workspace.

    Falls back to the nearest folder holding ``config/marin.yaml`` or ``pyproject.toml``.
    """
    key = os.fspath(start) if start else os.getcwd()
    kept = _kept
    if kept is not None and key in kept:
        return kept[key]
    found = _walk_up(key)
    if kept is not None:
        kept[key] = found
    return found


def _walk_up(start: str) -> Path | None:
    # os.path, not pathlib: a recorded `marin run` watches every call, and pathlib makes many.
    folder = os.path.realpath(start)
    fallback = None
    while True:
        pyproject = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(pyproject):
            try:
                with open(pyproject, encoding="utf-8") as f:
                    if "[tool.uv.workspace]" in f.read():
                        return Path(folder)
            except OSError:
                pass
            fallback = fallback or folder
        elif fallback is None and os.path.isfile(os.path.join(folder, "config", "marin.yaml")):
            fallback = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return Path(fallback) if fallback else None
        folder = parent
