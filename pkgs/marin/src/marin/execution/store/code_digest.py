"""A normalised digest of the code a step function runs, recorded with each build so that the plan
can say when that code changed since (Snakemake's code trigger; the step's hash never holds it).

What is digested: the source of each function or class, decorators included, parsed with
:mod:`ast`, docstrings dropped, dumped without line numbers. Comments, docstrings, blank lines and
formatting do not count; any change to code (a constant, an operator, a default, a decorator, a
base class) does. Type annotations count: they are code that runs (dataclass fields are declared by
them, config parsers read them), so ``lr: int`` becoming ``lr: float`` can change what a step does,
and an edit to an annotation alone costs at most a warning that the code changed. Source that
cannot be read (builtins, C extensions, functions typed into a REPL) is ``"unavailable"``; nothing
here raises.

How far the closure goes and why: from the step function, the functions and classes its code names
as globals (``co_names`` of its code and nested code, resolved in its module's globals, and the
decorators, defaults, annotations and base classes around it), the module attributes it reaches
(``mod.func``), and what its own ``import`` statements name (read from source files, see
``marin.execution.store.code_source``: step functions import their work inside their bodies), then
the same from each of those, but only code whose file lies in the workspace (the project with its
``pkgs/``): the code a user edits. Installed packages and the standard library change only with the
environment: the digest names the installed modules its code reaches (:attr:`CodeDigest.modules`:
what it imports, the modules of the functions, classes and objects it names), whose distributions'
versions, and those of what they require, are the step's own environment
(:meth:`CodeDigest.environment`, recorded with each build; a file-by-file step reuses no part built
on another). Marin's engine,
``marin.execution``, is left out too: every step reaches it, so one engine edit would report every
step changed, and the fingerprint holds the engine's version. The library's steps in
``marin.experiment``, ``levanter`` and ``zephyr`` are followed: in a workspace that holds them their
drift is what users want to hear about. The walk is breadth-first, names in sorted order, and
follows everything it reaches: the library's largest steps reach about 230 functions (fuzzy dedup,
``train_lm``, ``tokenized``), digested cold in well under a second and again, cached, in about a
millisecond (each function's digest and names are kept until its file changes). A walk that would
pass :data:`CLOSURE_LIMIT` functions (far beyond the whole workspace's) stops there and says so
(:attr:`CodeDigest.incomplete`), as does a name it could not follow through its re-exports: an
incomplete digest cannot tell that nothing changed, so a file-by-file step reuses no part by it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.identity import real_module_name, workspace_root
from marin.execution.store.code_home import defining_module
from marin.execution.store.code_record import CodeDigest
from marin.execution.store.code_source import (
    UNAVAILABLE,
    UNREADABLE,
    Binding,
    FileSource,
    Parsed,
    SourceReader,
    StaticDef,
    def_text,
    file_stamp,
    find_def,
    import_bindings,
    in_roots,
    module_folders,
    normalised_digest,
    realpath,
)

__all__ = ["CLOSURE_LIMIT", "UNAVAILABLE", "CodeDigest", "code_digest"]

CLOSURE_LIMIT = 10_000
"""The most functions and classes one step's digest covers, the step function included: a bound on
a pathological walk, three times the whole workspace's functions; one that reaches it is incomplete."""
ENGINE_PACKAGE = "marin.execution"
"""Marin's engine: never followed (its version is in the environment fingerprint)."""


def code_digest(fn: Callable[..., Any], roots: Sequence[str] | None = None) -> CodeDigest:
    """The :class:`CodeDigest` of ``fn`` and the functions and classes it reaches under ``roots``.

    Args:
        fn: the step function.
        roots: folders whose code is followed; by default the workspace root.
    """
    folders = _real_roots(roots)
    cached = _RESULTS.get((id(fn), folders))
    if cached is not None and cached[0] is fn and all(file_stamp(p) == s for p, s in cached[1].items()):
        return cached[2]
    reader = SourceReader(functools.partial(in_roots, roots=folders))
    start = _followable(fn) or fn
    seen, reached, frontier = {_key(start)}, [], [start]
    incomplete = None
    while frontier and incomplete is None:
        following = []
        for node in frontier:
            for ref in _references(node, reader):
                key = _key(ref)
                if key in seen:
                    continue
                if len(reached) + 1 >= CLOSURE_LIMIT:
                    incomplete = f"the walk stopped at {CLOSURE_LIMIT} functions"
                    break
                seen.add(key)
                if _in_workspace(ref, folders):
                    reached.append(ref)
                    following.append(ref)
                else:
                    reader.outside.add(_module_name(ref))
        frontier = following
    first = (_name_of(start), _entry(start, reader).digest)
    functions = (first, *sorted((_name_of(node), _entry(node, reader).digest) for node in reached))
    total = hashlib.sha256()
    for name, digest in functions:
        total.update(f"{name}\0{digest}\n".encode())
    result = CodeDigest(digest=total.hexdigest(), functions=functions, modules=_installed(reader.outside, folders),
                        incomplete=incomplete or reader.cut)
    _RESULTS[(id(fn), folders)] = (fn, reader.stamps(), result)
    return result


def _installed(modules: Iterable[str], folders: tuple[str, ...]) -> tuple[str, ...]:
    """The top-level names of ``modules`` outside the standard library and the workspace."""
    tops = {m.partition(".")[0] for m in modules if m}
    return tuple(sorted(top for top in tops if top not in sys.stdlib_module_names and top not in _NOT_INSTALLED
                        and not any(in_roots(path, folders) for path in module_folders(top))))


_NOT_INSTALLED = frozenset({"__main__", "__future__", "builtins", "?"})


def _module_name(value: Any) -> str:
    """The module ``value`` comes from: its own name (a module), where it is defined (a function or
    class), or its type's (an object: a tokenizer loaded into a global)."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, StaticDef):
        return value.module
    module = getattr(value, "__module__", None) if callable(value) else type(value).__module__
    return real_module_name(module) if isinstance(module, str) else "?"


_RESULTS: dict[tuple[int, tuple[str, ...]], tuple[Any, dict[str, Any], CodeDigest]] = {}
"""The last digest of each step function, with the stamps of the files it read: a step function
used by many steps is digested once, and again only when one of those files changed."""


@dataclass(frozen=True)
class _Entry:
    """What the digest needs of one function or class, cached while its file is unchanged."""

    obj: Any
    stamp: Any
    digest: str
    names: frozenset[str]
    """Global names its code reads (a :class:`StaticDef`'s: every name its source reads)."""
    chains: frozenset[tuple[str, ...]]
    local: Mapping[str, Binding]
    """What its own ``import`` statements bind."""


_ENTRIES: dict[tuple[Any, ...], _Entry] = {}


def _entry(node: Any, reader: SourceReader) -> _Entry:
    """The cached entry of a live function or class or a :class:`StaticDef`, made again when its file changed."""
    file = _source_file(node)
    stamp = reader.stamp(file) if file else None
    key = (isinstance(node, StaticDef), *_key(node))
    cached = _ENTRIES.get(key)
    if cached is not None and cached.stamp == stamp and (isinstance(node, StaticDef) or cached.obj is node):
        return cached
    parsed = node.parse(reader.source(node.file)) if isinstance(node, StaticDef) \
        else _live_parse(node, reader.source(file) if file else None)
    local: Mapping[str, Binding] = {}
    module, is_package = _module_of(node, file)
    if parsed.imports and module:
        local = import_bindings(parsed.imports, module, is_package)[0]
    names = parsed.names
    if not isinstance(node, StaticDef):  # globals as its code reads them; locals only where imported
        outer = _outer_names(parsed.tree) if parsed.tree is not None else set()
        names = frozenset(_code_names(node) | outer | (names & local.keys()))
    entry = _ENTRIES[key] = _Entry(node, stamp, parsed.digest, names, parsed.chains, local)
    return entry


def _live_parse(obj: Any, source: FileSource | None) -> Parsed:
    """The normalised digest of a live function or class, found in its file's ``source`` (else ``inspect``)."""
    if isinstance(obj, type):
        span = find_def(source, obj.__qualname__, True) if source else None
    elif isinstance(obj, types.FunctionType) and "<lambda>" not in obj.__qualname__:
        span = find_def(source, obj.__qualname__, False, obj.__code__.co_firstlineno) if source else None
    else:
        span = None
    if source is not None and span is not None:
        return normalised_digest(def_text(source, span))
    try:
        return normalised_digest(inspect.getsource(obj)) if isinstance(obj, types.FunctionType) else UNREADABLE
    except (OSError, TypeError, SyntaxError):
        return UNREADABLE


def _code_names(obj: Any) -> set[str]:
    """The global and attribute names a function's code (or a class's methods' code) uses, nested code included."""
    if isinstance(obj, types.FunctionType):
        stack = [obj.__code__]
    elif isinstance(obj, type):
        stack = [method.__code__ for method in _own_methods(obj)]
    else:
        return set()
    names: set[str] = set()
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _outer_names(tree: ast.AST) -> set[str]:
    """Names read outside function bodies: decorators, defaults, annotations, bases, class bodies."""
    names, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        for name, value in ast.iter_fields(node):
            if name == "body" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            stack.extend(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST))
    return names


def _references(node: Any, reader: SourceReader) -> list[Any]:
    """The functions and classes ``node`` names, in the order of their names: live objects where its
    module's globals say, :class:`StaticDef` where its own imports (or, for one, its file) say."""
    entry = _entry(node, reader)
    found: list[Any] = []
    scope = {} if isinstance(node, StaticDef) else _globals_of(node)
    for name in sorted(entry.names):
        if name in entry.local:
            found.append(reader.resolve_binding(entry.local[name]))
        elif isinstance(node, StaticDef):
            found.append(reader.resolve(node.module, name))
        elif name in scope:
            value = scope[name]
            if _followable(value) is None and not isinstance(value, int | float | str | bytes | bool | type(None)):
                reader.outside.add(_module_name(value))  # a module, a native function, an object it uses
            found.append(_followable(value))
    for chain in sorted(entry.chains):
        if chain[0] in entry.local:
            found.append(_static_chain(reader.resolve_binding(entry.local[chain[0]]), chain[1:], reader))
        elif isinstance(node, StaticDef):
            found.append(_static_chain(reader.resolve(node.module, chain[0]), chain[1:], reader))
        else:
            found.append(_live_chain(scope.get(chain[0]), chain[1:], reader))
    for cell in getattr(node, "__closure__", None) or ():
        try:
            found.append(_followable(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    reader.outside.update(ref for ref in found if isinstance(ref, str))  # modules it imports
    return [ref for ref in found if isinstance(ref, StaticDef) or _followable(ref) is not None]


def _live_chain(value: Any, attrs: tuple[str, ...], reader: SourceReader) -> Any:
    """The function or class ``value.attr.attr`` is, through modules only; None otherwise.

    Past a module it is read from source: whether a submodule or a lazily re-exported name is an
    attribute of its package yet depends on what this process happened to import.
    """
    if isinstance(value, types.ModuleType) and attrs:
        return _static_chain(value.__name__, attrs, reader)
    return _followable(value)


def _static_chain(value: StaticDef | str | None, attrs: tuple[str, ...], reader: SourceReader) -> StaticDef | None:
    """The definition ``value.attr.attr`` is when ``value`` names a module, read from source."""
    for attr in attrs:
        if not isinstance(value, str):
            break
        value = reader.resolve(value, attr)
    return value if isinstance(value, StaticDef) else None


def _globals_of(obj: Any) -> Mapping[str, Any]:
    """The globals ``obj``'s code runs with (a class: those of its methods, wherever it says it lives)."""
    if isinstance(obj, types.FunctionType):
        return obj.__globals__
    for method in _own_methods(obj) if isinstance(obj, type) else ():
        return method.__globals__
    module = defining_module(obj) if isinstance(obj, type) else None
    return vars(module) if module is not None else {}


def _module_of(node: Any, file: str | None) -> tuple[str | None, bool]:
    """The module name relative imports in ``node`` start from, and whether it is a package."""
    is_package = bool(file) and os.path.basename(file or "") == "__init__.py"
    if isinstance(node, StaticDef):
        return node.module, is_package
    name = _globals_of(node).get("__name__")
    return (name if isinstance(name, str) else None), is_package


def _followable(value: Any) -> Any:
    """The function or class ``value`` is, unwrapped (partials, decorators, static methods); else None."""
    for _ in range(100):
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, staticmethod | classmethod):
            value = value.__func__
        elif not isinstance(value, type | types.ModuleType):
            try:  # what functools.wraps left, never an object's own __getattr__ (a lazy proxy's import)
                wrapped = object.__getattribute__(value, "__dict__").get("__wrapped__")
            except (AttributeError, TypeError):
                break
            if wrapped is None:
                break
            value = wrapped
        else:
            break
    return value if isinstance(value, types.FunctionType | type) else None


def _source_file(node: Any) -> str | None:
    """The file that defines ``node`` (a class: the file of a method it defines), or None."""
    if isinstance(node, StaticDef):
        return node.file
    if isinstance(node, types.FunctionType):
        return _real_file(node.__code__.co_filename)
    if isinstance(node, type):
        for method in _own_methods(node):
            return method.__code__.co_filename
        return _real_file(getattr(defining_module(node), "__file__", None))
    return None


def _own_methods(cls: type) -> list[types.FunctionType]:
    """The functions written in ``cls``'s body, not those dataclasses write (their file is ``<string>``)."""
    members = (_followable(value) for value in vars(cls).values())
    return [m for m in members if isinstance(m, types.FunctionType) and m.__qualname__.startswith(cls.__qualname__ + ".")
            and _real_file(m.__code__.co_filename) is not None]


def _real_file(name: Any) -> str | None:
    """``name`` if it names a file (an absolute path), not ``<string>`` or ``<frozen os>``."""
    return name if isinstance(name, str) and os.path.isabs(name) else None


def _key(node: Any) -> tuple[Any, ...]:
    """One function or class however it was reached: its file and qualified name."""
    file = _source_file(node)
    qualname = getattr(node, "qualname", None) if isinstance(node, StaticDef) else getattr(node, "__qualname__", None)
    if file is None or not isinstance(qualname, str) or "<lambda>" in qualname:
        return ("id", id(node))
    return (realpath(file), qualname)


def _name_of(node: Any) -> str:
    """``module:qualname`` of ``node``, the module being the one whose code defines it."""
    qualname = getattr(node, "__qualname__", None) or getattr(node, "__name__", None) or type(node).__qualname__
    return f"{node.module}:{node.qualname}" if isinstance(node, StaticDef) else f"{_home(node)}:{qualname}"


def _home(node: Any) -> str:
    """The module whose code defines live ``node``, by the name it ran under (``__main__`` replaced by
    its real name), never the ``__module__`` a moved object keeps: a function or class reached both
    live and read from source, in any process, whatever else it imported, has one name."""
    name = _globals_of(node).get("__name__") if isinstance(node, types.FunctionType | type) else None
    module = name if isinstance(name, str) else getattr(node, "__module__", None)
    return real_module_name(module) if isinstance(module, str) else "?"


def _in_workspace(node: Any, roots: tuple[str, ...]) -> bool:
    """Whether ``node`` is defined under ``roots``, outside installed packages and Marin's engine."""
    module = node.module if isinstance(node, StaticDef) else _home(node)
    if module == ENGINE_PACKAGE or module.startswith(ENGINE_PACKAGE + "."):
        return False
    file = _source_file(node)
    return file is not None and in_roots(file, roots)


def _real_roots(roots: Sequence[str] | None) -> tuple[str, ...]:
    if roots is None:
        root = workspace_root()
        roots = [root] if root else []
    return tuple(realpath(os.fspath(root)) for root in roots)
