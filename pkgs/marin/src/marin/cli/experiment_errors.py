"""What an experiment file did wrong while it was imported, as one line naming the file and line.

A misspelled name (imported, or looked up on a module) gets "did you mean"; a handle called
without an argument it needs, or with one it does not take, is named with that argument and the
fix (``train_lm 'checkpoints/x': missing version=; add version="v1" (...)``); a handle refusing a
value says what it refused. Everything here runs only once an import has failed.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import pkgutil
import re
import sys
import traceback
from types import FrameType, ModuleType
from typing import Any

from marin.cli.errors import MarinError
from marin.execution.core.errors import InvalidStep
from rigging.names import closest_name, did_you_mean

__all__ = ["experiment_error"]

HINT = "fix the experiment file (run again with --verbose for the traceback)"

_CALL_ERROR = re.compile(r"^(?P<fn>[\w.]+)\(\) (?P<rest>.+)$")
_EXAMPLES = {"version": '"v1"'}
"""A value to show in the fix for an argument every handle spells the same way (a step's version
is ``"v1"`` unless bumped, as ``Step`` defaults it)."""


def experiment_error(e: Exception, path: str) -> Exception:
    """The user's error ``e``, raised while the experiment file ``path`` was imported, as a
    ``MarinError`` naming ``path:line``; ``e`` itself when the CLI's own handler says it better (a
    syntax error, an import error outside the file)."""
    if isinstance(e, MarinError | SyntaxError):
        return e
    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == path]
    if isinstance(e, ImportError) and not frames:
        return e
    where = f"{path}:{frames[-1].lineno}" if frames else path
    what = None
    innermost = _innermost_frame(e)
    if isinstance(e, ImportError):
        what = _import_message(e)
    elif isinstance(e, TypeError) and frames and innermost is not None and _in_file(innermost, path):
        what = _call_message(str(e), innermost, path, frames[-1].lineno or 0)
    elif isinstance(e, AttributeError | NameError):
        what = _name_message(e, innermost, path)
    elif isinstance(e, ValueError | TypeError) and frames:
        what = _refused_by_handle(e, path, frames[-1].lineno or 0)
    if what is None:
        # The engine's own refusals say what is wrong in words; other exceptions are named by type.
        what = str(e) if isinstance(e, InvalidStep) else f"{type(e).__name__}: {e}"
    hint = "check the module path and that its dependencies are installed" if isinstance(e, ModuleNotFoundError) else HINT
    return MarinError(f"{where}: {what}", hint=hint)


def _innermost_frame(e: BaseException) -> FrameType | None:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None else None


def _in_file(frame: FrameType, path: str) -> bool:
    """The frame runs the file's own code: a call made there failed before the callee started
    (its arguments did not fit), not inside the callee."""
    return os.path.abspath(frame.f_code.co_filename) == path


def _import_message(e: ImportError) -> str:
    wanted = re.match(r"cannot import name '([^']+)' from '([^']+)'", str(e))
    if wanted is not None:
        name, module = wanted.groups()
        return f"cannot import name {name!r} from {module}" + did_you_mean(name, _public_names(sys.modules.get(module)))
    if isinstance(e, ModuleNotFoundError) and e.name:
        return f"import failed: no module named {e.name!r}" + did_you_mean(e.name, _sibling_modules(e.name))
    return f"import failed: {e}"


def _public_names(owner: Any) -> list[str]:
    return [n for n in dir(owner) if not n.startswith("_")] if owner is not None else []


def _sibling_modules(name: str) -> list[str]:
    """The modules a misspelled module path may have meant: its parent package's, or the top-level ones."""
    parent, _, _ = name.rpartition(".")
    package = sys.modules.get(parent) if parent else None
    if parent and package is None:
        return []
    where = getattr(package, "__path__", None) if package is not None else None
    if package is not None and where is None:
        return []
    found = [m.name for m in pkgutil.iter_modules(where)]
    return [f"{parent}.{m}" for m in found] if parent else [*found, *sys.builtin_module_names]


def _name_message(e: AttributeError | NameError, frame: FrameType | None, path: str) -> str | None:
    """A misspelled name, looked up in the file (``NameError``) or on a module or object it names
    (``AttributeError``; a module's own ``__getattr__`` may have raised it)."""
    name = getattr(e, "name", None)
    if not isinstance(name, str):
        return None
    if isinstance(e, AttributeError):
        owner = getattr(e, "obj", None)
        if owner is None or not (isinstance(owner, ModuleType) or (frame is not None and _in_file(frame, path))):
            return None
        return f"AttributeError: {e}" + did_you_mean(name, _public_names(owner))
    scope = [*frame.f_globals, *frame.f_locals, *dir(builtins)] if frame is not None else dir(builtins)
    return f"NameError: {e}" + did_you_mean(name, scope)


def _call_message(message: str, frame: FrameType, path: str, line: int) -> str | None:
    """A call on ``line`` whose arguments did not fit the callee (Python's ``TypeError``), in terms
    of the handle: which argument is missing or unknown, and the fix."""
    parsed = _CALL_ERROR.match(message)
    if parsed is None:
        return None
    qualname, rest = parsed["fn"], parsed["rest"]
    call, fn = _the_call(path, line, qualname, frame)
    callee = qualname.removesuffix(".__init__").rsplit(".", 1)[-1]
    label = _handle_label(callee, call)
    params = _parameters(fn)
    written = [k.arg for k in call.keywords if k.arg] if call is not None else []
    named = re.findall(r"'(\w+)'", rest)
    if rest.startswith("missing") and named:
        for name in named:
            typo = closest_name(name, [w for w in written if w not in params])
            if typo is not None:
                return f"{label}: {typo}= is not an argument of {callee}; did you mean {name}=?"
        fixes = "; ".join(_fix(fn, name) for name in named)
        return f"{label}: missing {', '.join(n + '=' for n in named)}; {fixes}"
    if rest.startswith("got an unexpected keyword argument") and named:
        name = named[0]
        close = closest_name(name, params)
        more = f"did you mean {close}=?" if close else f"its arguments are: {', '.join(params) or 'none'}"
        return f"{label}: {name}= is not an argument of {callee}; {more}"
    if rest.startswith("got multiple values for argument") and named:
        return f"{label}: {named[0]} is given twice (by position and as {named[0]}=); give it once"
    if rest.startswith("takes"):
        keywords = ", ".join(f"{p}=" for p in params)
        return f"{label}: {rest}; pass the others by name" + (f" ({keywords})" if keywords else "")
    return None


def _refused_by_handle(e: Exception, path: str, line: int) -> str | None:
    """A value refused inside the handle called on ``line`` (``evaluate(...)`` checking its
    ``model``), prefixed with that handle unless its message names it already."""
    if isinstance(e, InvalidStep):
        return None  # the engine's refusals name the step
    frames = [frame for frame, _ in traceback.walk_tb(e.__traceback__)]
    ours = [i for i, frame in enumerate(frames) if _in_file(frame, path)]
    if not ours or ours[-1] + 1 >= len(frames):
        return None
    callee = frames[ours[-1] + 1].f_code.co_name
    if str(e).startswith(callee):
        return None
    call = next((c for c in _calls_on(path, line) if _callee_name(c.func) == callee), None)
    return f"{_handle_label(callee, call)}: {e}" if call is not None else None


def _fix(fn: Any, name: str) -> str:
    """``add version="v1" (bump to retrain ...)``: the argument, a value where one is known, and
    what the callee's docstring says of it."""
    doc = _param_doc(fn, name)
    return f"add {name}={_EXAMPLES.get(name, '...')}" + (f" ({doc})" if doc else "")


def _param_doc(fn: Any, name: str) -> str | None:
    """The first sentence its docstring's ``Args:`` section says of ``name``, if any."""
    doc = inspect.getdoc(fn) if fn is not None else None
    if not doc or "Args:" not in doc:
        return None
    text: list[str] = []
    for line in doc.split("Args:", 1)[1].splitlines()[1:]:
        if line and not line.startswith(" "):
            break  # the next section
        entry = re.match(r"^ {2,4}(\w+)(?: \([^)]*\))?:\s*(.*)$", line)
        if entry is not None:
            if text:
                break
            if entry[1] == name:
                text.append(entry[2])
        elif text:
            text.append(line.strip())
    if not text:
        return None
    first = re.split(r"(?<=[a-z0-9)`])\.(?:\s|$)", " ".join(text).strip(), maxsplit=1)[0]
    return first.replace("``", "`").rstrip(".") or None


def _parameters(fn: Any) -> list[str]:
    """The names ``fn`` takes by keyword (the callee's signature), ``[]`` when it cannot be read."""
    if fn is None:
        return []
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _the_call(path: str, line: int, qualname: str, frame: FrameType) -> tuple[ast.Call | None, Any]:
    """The call on ``line`` of ``path`` whose callee Python named ``qualname``, and that callee (the
    innermost such call when several span the line)."""
    for call in _calls_on(path, line):
        fn = _resolve(call.func, frame)
        if fn is not None and _qualname(fn) == qualname:
            return call, fn
    return None, None


def _calls_on(path: str, line: int) -> list[ast.Call]:
    """The calls of ``path`` spanning ``line``, innermost first."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return sorted(calls, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, -n.col_offset))


def _callee_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _qualname(fn: Any) -> str | None:
    if inspect.isclass(fn):
        return f"{fn.__qualname__}.__init__"
    return getattr(fn, "__qualname__", None)


def _resolve(node: ast.expr, frame: FrameType) -> Any:
    """What a callee expression (``name`` or ``a.b.name``) names in the frame, or None."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
            if node.id in scope:
                return scope[node.id]
        return None
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, frame)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _handle_label(callee: str, call: ast.Call | None) -> str:
    """``train_lm 'checkpoints/x'`` when the call names its step, else ``train_lm(...)``."""
    if call is not None:
        given = [k.value for k in call.keywords if k.arg == "name"] + call.args[:1]
        for value in given:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return f"{callee} {value.value!r}"
    return f"{callee}(...)"
