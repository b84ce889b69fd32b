"""Load the steps of a TARGET: a Python file, a module path, ``FILE:attr`` or a folder."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from marin.cli.errors import MarinError
from marin.cli.experiment_errors import experiment_error
from marin.execution.core.identity import module_name_for_path
from marin.execution.core.lazy import Lazy, lower_targets
from marin.execution.core.step import Step

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
        except Exception as e:
            raise experiment_error(e, abspath) from e
    spec = importlib.util.spec_from_file_location(name, abspath)
    if spec is None or spec.loader is None:
        raise MarinError(f"cannot import {path}", hint="is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise experiment_error(e, abspath) from e
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _steps_from(obj: Any, where: str) -> list[Step]:
    if callable(obj) and not isinstance(obj, Step | Lazy):
        required = _required_params(obj)
        if required:
            raise MarinError(f"{where} needs arguments ({', '.join(required)}); a target function must take none",
                             hint="give defaults to its parameters, or wrap it in a function without parameters")
        obj = obj()
    if isinstance(obj, Step | Lazy):
        obj = [obj]
    if not isinstance(obj, list | tuple):
        raise MarinError(f"{where} is not a list of steps (got {type(obj).__name__})",
                         hint="expose `steps = [...]` or a function returning a list of steps")
    for i, item in enumerate(obj):
        if not isinstance(item, Step | Lazy):
            raise MarinError(f"{where}[{i}] is not a step (got {type(item).__name__})")
    return lower_targets(obj)


def _required_params(fn: Any) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _module_steps(module: ModuleType, attr: str | None, label: str) -> list[Step]:
    if attr:
        if not hasattr(module, attr):
            raise MarinError(f"{label} has no attribute {attr!r}")
        return _steps_from(getattr(module, attr), f"{label}:{attr}")
    if hasattr(module, "steps"):
        steps = _steps_from(module.steps, f"{label}:steps")
        if not steps:
            raise MarinError(f"{label} defines an empty steps list")
        return steps
    shape = _file_shape(getattr(module, "__file__", None))
    if shape.runs_in_main:
        captured = _capture_main(module, shape, label)
        if captured is not None:
            return _steps_from(captured, f"{label} (__main__)")
    handles = [getattr(module, name) for name in shape.assigned if isinstance(getattr(module, name, None), Step | Lazy)]
    if handles:
        return _steps_from(handles, label)
    raise MarinError(f"{label} defines no steps",
                     hint="add a module-level `steps = [...]` list, build steps at module level, or run them "
                          "under __main__ with executor_main(steps=[...]) or StepRunner().run([...])")


@dataclass(frozen=True)
class _FileShape:
    """What an experiment file does at its top level, read with ``ast`` (nothing executed)."""

    defines_steps: bool = False
    """It assigns or defines a module-level ``steps``."""
    runs_in_main: bool = False
    """Its ``if __name__ == "__main__":`` block calls ``executor_main(...)`` or ``<runner>.run(...)``."""
    assigned: tuple[str, ...] = ()
    """Names it assigns at module level, in order (candidates for module-level steps and handles)."""
    main_blocks: tuple[ast.If, ...] = ()


def _is_main_test(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _calls_a_runner(node: ast.AST) -> bool:
    """``executor_main(...)``, or ``StepRunner(...)`` together with a ``.run(...)`` call, inside ``node``."""
    makes_runner = calls_run = False
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            name = getattr(child.func, "id", getattr(child.func, "attr", None))
            if name == "executor_main":
                return True
            makes_runner = makes_runner or name == "StepRunner"
            calls_run = calls_run or (isinstance(child.func, ast.Attribute) and child.func.attr == "run")
    return makes_runner and calls_run


def _runs_steps(block: ast.If, functions: dict[str, ast.AST]) -> bool:
    """The block runs steps itself, or calls a module-level function of the file that does."""
    if _calls_a_runner(block):
        return True
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in functions
               and _calls_a_runner(functions[c.func.id]) for c in ast.walk(block))


def _file_shape(path: str | None) -> _FileShape:
    if not path or not path.endswith(".py"):
        return _FileShape()
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return _FileShape()
    assigned: list[str] = []
    defines_steps = False
    mains: list[ast.If] = []
    functions: dict[str, ast.AST] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = node
            defines_steps = defines_steps or node.name == "steps"
        elif isinstance(node, ast.If) and _is_main_test(node.test):
            mains.append(node)
        for t in targets:
            for name in ast.walk(t):
                if isinstance(name, ast.Name):
                    if name.id == "steps":
                        defines_steps = True
                    elif name.id not in assigned:
                        assigned.append(name.id)
    runs = any(_runs_steps(m, functions) for m in mains)
    return _FileShape(defines_steps, runs, tuple(assigned), tuple(mains) if runs else ())


def _capture_main(module: ModuleType, shape: _FileShape, label: str) -> list[Any] | None:
    """Run the file's ``__main__`` block in the module's namespace, taking the steps it would run.

    The block sees its own file as ``sys.argv`` (so its command-line parsing takes defaults).
    """
    from marin.execution.run.capture import Captured, capturing

    code = compile(ast.Module(body=[stmt for m in shape.main_blocks for stmt in m.body], type_ignores=[]),
                   module.__file__ or label, "exec")
    saved_argv = sys.argv
    sys.argv = [module.__file__ or label]
    try:
        with capturing():
            exec(code, module.__dict__)  # noqa: S102 - the user's own experiment file, as `python FILE` would
    except Captured as c:
        return c.steps
    except SystemExit as e:
        raise MarinError(f"{label}: its __main__ block exited ({e.code}) before running any steps",
                         hint="run it with python to see its own message") from None
    finally:
        sys.argv = saved_argv
    return None


def _folder_modules(folder: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("_"):
                found.append(os.path.join(dirpath, name))
    return found


def _is_experiment_file(path: str) -> bool:
    """A module-level ``steps``, or a ``__main__`` block that runs steps (read with ``ast``)."""
    shape = _file_shape(path)
    return shape.defines_steps or shape.runs_in_main


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
            if e.name is None or not (spec == e.name or spec.startswith(e.name + ".")):
                raise _module_error(e, spec) from e  # the module is there: something it imports is not
            raise MarinError(f"target {spec!r} is neither a file nor an importable module ({e})",
                             hint="give a path to a .py file, a dotted module path, or a folder") from None
        except Exception as e:
            raise _module_error(e, spec) from e
        steps.extend(_module_steps(module, attr, spec))
    return steps


def _module_error(e: Exception, spec: str) -> Exception:
    """An error raised while the module ``spec`` was imported, naming its file and line."""
    found = importlib.util.find_spec(spec)
    return experiment_error(e, os.path.abspath(found.origin or spec) if found else spec)
