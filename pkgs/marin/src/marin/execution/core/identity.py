"""Where a function or class comes from, as the hash sees it: ``module:qualname``, independent of
how its module was started (a script, ``python -m``, an import) and of where the workspace lies."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from marin.execution.core.errors import InvalidStep
from rigging.config.discovery import find_workspace_root

__all__ = ['fn_identity', 'keep_identities', 'keep_identity', 'module_name_for_path', 'qualified_name', 'real_module_name', 'workspace_root']


_ROOT_CACHE: dict[str, str | None] = {}


def workspace_root() -> str | None:
    """The workspace root (cached per working folder); absolute paths under it are hashed relative."""
    cwd = os.getcwd()
    if cwd not in _ROOT_CACHE:
        found = find_workspace_root(cwd)
        _ROOT_CACHE[cwd] = str(found) if found else None
    return _ROOT_CACHE[cwd]


def module_name_for_path(path: str) -> str:
    """The module name of a Python file: dotted path relative to the workspace root, else its stem."""
    abspath = os.path.realpath(path)
    root = find_workspace_root(os.path.dirname(abspath))
    stem = os.path.splitext(abspath)[0]
    if root is not None:
        rel = os.path.relpath(stem, os.path.realpath(str(root)))
        if not rel.startswith(".."):
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if all(p.isidentifier() for p in parts):
                return ".".join(parts)
    return os.path.basename(stem)


def real_module_name(module: str) -> str:
    """``module``, with ``__main__`` (a script or ``python -m``) replaced by its real name."""
    if module not in ("__main__", "__mp_main__"):
        return module
    main = sys.modules.get(module) or sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name not in ("__main__", "__mp_main__"):
        return spec.name
    file = getattr(main, "__file__", None)
    if file:
        return module_name_for_path(file)
    return module


def qualified_name(obj: Any) -> str:
    """``module:qualname`` of a function or class, independent of how its module was started."""
    return f"{real_module_name(obj.__module__)}:{obj.__qualname__}"


def fn_identity(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of ``fn``, with ``__main__`` replaced by the module's real name."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname:
        raise InvalidStep(f"fn {fn!r} has no module or qualified name; use a module-level function")
    return f"{real_module_name(module)}:{qualname}"


_Named = TypeVar("_Named")


def keep_identity(module: str) -> Callable[[_Named], _Named]:
    """Keep a moved function's or class's identity: its ``__module__`` stays ``module``.

    A step's hash holds ``module:qualname`` of its function and of its config's classes, so moving
    one to another module would change the hash of every step that uses it. The old module
    re-exports the moved object (workers and pickle find it there by that name), and the object
    names the old module as its own, as numpy's public functions name ``numpy``.
    """

    def keep(obj: _Named) -> _Named:
        obj.__module__ = module  # type: ignore[attr-defined]
        return obj

    return keep


def keep_identities(namespace: Mapping[str, Any], module: str) -> None:
    """Keep the identity of every class and function a moved module defines: ``module``, its old name.

    Called at the end of the moved module with its ``globals()``: what :func:`keep_identity` does
    for one object, for all that the module defines (not what it imports). The old name must stay
    importable as the same module object (a module there that puts the moved one in its place in
    ``sys.modules``), so that workers, pickle and type hints find everything under it.
    """
    here = namespace["__name__"]
    for value in list(namespace.values()):
        if (isinstance(value, type) or callable(value)) and getattr(value, "__module__", None) == here \
                and isinstance(getattr(value, "__qualname__", None), str):
            value.__module__ = module
