"""Load the steps of a TARGET: a Python file, a module path, ``FILE:attr`` or a folder."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from marin.cli.errors import MarinError
from marin.execution.hashing import module_name_for_path
from marin.execution.lazy import Lazy
from marin.execution.step import Step

__all__ = ["load_module", "load_targets"]


def load_module(path: str) -> ModuleType:
    """Import a Python file as Python imports a script: its folder on ``sys.path``, under a module
    name from its path relative to the workspace root (its file name outside the workspace)."""
    abspath = os.path.abspath(path)
    name = module_name_for_path(abspath)
    folder = os.path.dirname(abspath)
    from rigging.config.discovery import find_workspace_root

    root = find_workspace_root(folder)
    for entry in (folder, str(root) if root else None):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    existing = sys.modules.get(name)
    if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") == abspath:
        return existing
    if "." in name:
        try:
            module = importlib.import_module(name)
            if os.path.abspath(module.__file__ or "") == abspath:
                return module
        except ImportError:
            pass
    spec = importlib.util.spec_from_file_location(name, abspath)
    if spec is None or spec.loader is None:
        raise MarinError(f"cannot import {path}", hint="is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _steps_from(obj: Any, where: str) -> list[Step]:
    if callable(obj) and not isinstance(obj, Step | Lazy):
        obj = obj()
    if isinstance(obj, Step | Lazy):
        obj = [obj]
    if not isinstance(obj, list | tuple):
        raise MarinError(f"{where} is not a list of steps (got {type(obj).__name__})",
                         hint="expose `steps = [...]` or a function returning a list of steps")
    out = []
    for i, item in enumerate(obj):
        if isinstance(item, Lazy):
            item = item.lower()
        if not isinstance(item, Step):
            raise MarinError(f"{where}[{i}] is not a step (got {type(item).__name__})")
        out.append(item)
    return out


def _module_steps(module: ModuleType, attr: str | None, label: str) -> list[Step]:
    if attr:
        if not hasattr(module, attr):
            raise MarinError(f"{label} has no attribute {attr!r}")
        return _steps_from(getattr(module, attr), f"{label}:{attr}")
    if not hasattr(module, "steps"):
        raise MarinError(f"{label} defines no steps", hint="add a module-level `steps = [...]` list (or a function returning one)")
    steps = _steps_from(module.steps, f"{label}:steps")
    if not steps:
        raise MarinError(f"{label} defines an empty steps list")
    return steps


def _folder_modules(folder: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("_"):
                found.append(os.path.join(dirpath, name))
    return found


def _is_experiment_file(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    return "\nsteps" in text or text.startswith("steps") or "def steps" in text


def load_targets(targets: list[str], importer: Callable[[str], ModuleType] = load_module) -> list[Step]:
    """All steps named by ``targets`` (each a file, module, ``FILE:attr`` or folder)."""
    steps: list[Step] = []
    for target in targets:
        attr = None
        spec = target
        if ":" in target and not os.path.exists(target):
            spec, attr = target.rsplit(":", 1)
        if os.path.isdir(spec):
            files = [f for f in _folder_modules(spec) if _is_experiment_file(f)]
            if not files:
                raise MarinError(f"folder {spec} holds no experiment modules", hint="an experiment module defines `steps`")
            for f in files:
                steps.extend(_module_steps(importer(f), attr, f))
            continue
        if spec.endswith(".py") or os.sep in spec or os.path.exists(spec):
            if not os.path.isfile(spec):
                raise MarinError(f"target file {spec} does not exist", hint="give a Python file, a module path or a folder")
            steps.extend(_module_steps(importer(spec), attr, spec))
            continue
        from rigging.config.discovery import find_workspace_root

        root = find_workspace_root()
        if root is not None and str(root) not in sys.path:
            sys.path.insert(0, str(root))
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as e:
            raise MarinError(f"target {spec!r} is neither a file nor an importable module ({e})",
                             hint="give a path to a .py file, a dotted module path, or a folder") from None
        steps.extend(_module_steps(module, attr, spec))
    return steps
