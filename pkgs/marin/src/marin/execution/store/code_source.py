"""The source of functions and classes as the code digest reads it, and what names in that source
refer to when read from the files alone (``marin.execution.store.code_digest``).

A step function often imports inside its body (``from pkg.tokenize import run``) so that importing
an experiment stays light. Whether ``pkg.tokenize`` is imported yet depends on the process (the
planner has not, a worker that ran the step has), so such names are resolved from source files,
never from ``sys.modules`` and never by importing: the digest is the same in both.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import textwrap
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["UNAVAILABLE", "UNREADABLE", "Binding", "FileSource", "Parsed", "SourceReader", "Span", "StaticDef", "def_text",
           "file_source", "file_stamp", "find_def", "import_bindings", "in_roots", "module_file", "module_folders",
           "normalised_digest", "realpath"]

UNAVAILABLE = "unavailable"
"""The digest of a function whose source cannot be read."""
_RESOLVE_DEPTH = 8
"""The most re-exports (``from a import b`` in ``a``'s parent) followed to find one name."""

_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
Binding = tuple[str, ...]
"""``("def", name)``, ``("module", dotted)`` or ``("from", dotted, attr)``."""


Stamp = tuple[int, int, int]
"""A file's modification time (ns), size and inode: a file saved anew has another."""


def file_stamp(path: str) -> Stamp | None:
    """The :data:`Stamp` of ``path``, or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


@dataclass(frozen=True)
class Span:
    """Where one definition lies in its file: its first line (decorators included) and last."""

    is_class: bool
    start: int
    end: int


@dataclass
class FileSource:
    """One Python file as read now: its lines, where each definition lies, its module-level names.

    The syntax tree is not kept: a workspace's trees would hold tens of megabytes.
    """

    stamp: Stamp | None
    lines: list[str]
    spans: dict[str, list[Span]]
    """Definitions by qualified name (``<locals>`` left out), in order."""
    top: list[ast.Import | ast.ImportFrom | str]
    """Module-level ``import`` and ``from`` statements and the names of definitions, in order."""
    bindings: dict[str, tuple[dict[str, Binding], list[str]]] = field(default_factory=dict)
    """:func:`import_bindings` of ``top``, by the module name it was read as (relative imports)."""


_FILES: dict[str, FileSource] = {}


def file_source(path: str, stamp: Stamp | None) -> FileSource | None:
    """``path`` read and parsed, cached while its ``stamp`` (:func:`file_stamp`) stays; None if unreadable."""
    cached = _FILES.get(path)
    if cached is not None and cached.stamp == stamp:
        return cached
    try:
        with tokenize.open(path) as f:
            text = f.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None
    spans: dict[str, list[Span]] = {}
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, parent = stack.pop()
        for stmt in _statements(parent):
            if isinstance(stmt, _Def):
                start = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                span = Span(isinstance(stmt, ast.ClassDef), start, stmt.end_lineno or start)
                spans.setdefault(prefix + stmt.name, []).append(span)
                stack.append((f"{prefix}{stmt.name}.", stmt))
    top = [s.name if isinstance(s, _Def) else s for s in _statements(tree) if isinstance(s, _Def | ast.Import | ast.ImportFrom)]
    for found in spans.values():
        found.sort(key=lambda span: span.start)
    source = _FILES[path] = FileSource(stamp=stamp, lines=text.splitlines(keepends=True), spans=spans, top=top)
    return source


@dataclass(frozen=True)
class Parsed:
    """A function's or class's source, normalised: its digest and what it names."""

    digest: str
    tree: ast.AST | None = None
    """None when the source did not parse (or could not be read)."""
    names: frozenset[str] = frozenset()
    """Every name it reads."""
    chains: frozenset[tuple[str, ...]] = frozenset()
    """Its ``name.attr.attr`` chains, as ``(name, attr, attr)``."""
    imports: tuple[ast.Import | ast.ImportFrom, ...] = ()
    """Its own ``import`` and ``from`` statements."""


UNREADABLE = Parsed(UNAVAILABLE)


def normalised_digest(source: str) -> Parsed:
    """SHA-256 of ``source`` parsed, docstrings dropped, dumped without positions, and what it names.

    Source that does not parse on its own (a lambda cut from a call) is digested as its text
    without blank lines or indentation, and names nothing.
    """
    source = textwrap.dedent(source)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        text = "\n".join(line.strip() for line in source.splitlines() if line.strip())
        return Parsed(hashlib.sha256(text.encode()).hexdigest())
    names, chains, imports = set(), set(), []
    for node in ast.walk(tree):  # one walk: the trees of a large closure are most of a first digest's time
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            head = node.body[0]
            if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant) and isinstance(head.value.value, str):
                node.body = node.body[1:]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, ast.Attribute):
            attrs = []
            while isinstance(node, ast.Attribute):
                attrs.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name):
                chains.add((node.id, *reversed(attrs)))
    dump = ast.dump(tree, annotate_fields=True, include_attributes=False)
    return Parsed(hashlib.sha256(dump.encode()).hexdigest(), tree, frozenset(names), frozenset(chains), tuple(imports))


def def_text(source: FileSource, span: Span) -> str:
    """The source of a definition, its decorators included."""
    return "".join(source.lines[span.start - 1:span.end])


def find_def(source: FileSource, qualname: str, is_class: bool, line: int | None = None) -> Span | None:
    """Where ``qualname`` (a function's or class's ``__qualname__``) is defined in ``source``.

    Of several (a name defined twice), the one starting at ``line`` if given, else the last.
    """
    path = ".".join(part for part in qualname.split(".") if part != "<locals>")
    found = [span for span in source.spans.get(path, ()) if span.is_class == is_class]
    at_line = [span for span in found if span.start == line]
    return (at_line or found or [None])[-1]


def _statements(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements directly in ``node``'s body, in order, those under if, try, with and loops too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child
            if not isinstance(child, _Def):
                yield from _statements(child)
        elif isinstance(child, ast.excepthandler | ast.match_case):
            yield from _statements(child)


@dataclass(frozen=True)
class StaticDef:
    """A module-level function or class found in a file's source, not (necessarily) imported."""

    file: str
    module: str
    qualname: str
    span: Span = field(compare=False, repr=False)

    def parse(self, source: FileSource | None) -> Parsed:
        """:func:`normalised_digest` of its source, read from ``source`` (its file)."""
        return normalised_digest(def_text(source, self.span)) if source else UNREADABLE


def _spec(module: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``module`` as the import system would find it now, importing nothing."""
    parent, _, _ = module.rpartition(".")
    if not parent:
        return _found_spec(module, tuple(sys.path))
    parent_spec = _spec(parent)
    locations = parent_spec.submodule_search_locations if parent_spec else None
    return _found_spec(module, tuple(locations)) if locations else None


@functools.lru_cache(maxsize=8192)
def _found_spec(module: str, path: tuple[str, ...]) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``module`` in the folders ``path`` (for a top-level module, ``sys.path``)."""
    try:
        if "." not in module:
            return importlib.util.find_spec(module)  # a top-level name: nothing to import first
        return importlib.machinery.PathFinder.find_spec(module, list(path))
    # Finders of installed packages: a namespace package under one not imported raises KeyError.
    except (ImportError, ValueError, KeyError, AttributeError, OSError, TypeError):
        return None


def module_folders(module: str) -> tuple[str, ...]:
    """The file of ``module`` and the folders of its package (a namespace package: only those), as
    the import system would find them, importing nothing."""
    spec = _spec(module)
    if spec is None:
        return ()
    origin = spec.origin if isinstance(spec.origin, str) and os.path.isabs(spec.origin) else None
    return (*([origin] if origin else []), *(spec.submodule_search_locations or ()))


def module_file(module: str) -> str | None:
    """The ``.py`` file of module ``module``, found as the import system would, importing nothing."""
    spec = _spec(module)
    origin = spec.origin if spec else None
    return origin if isinstance(origin, str) and origin.endswith(".py") and os.path.isabs(origin) else None


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str | None:
    """The absolute name of ``from {'.' * level}{target} import ...`` written in ``module``."""
    if level == 0:
        return target
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(parts):
        return None
    base = ".".join(parts[:len(parts) - (level - 1)])
    return f"{base}.{target}" if target and base else (target or base or None)


def import_bindings(statements: Iterable[ast.AST | str], module: str, is_package: bool,
                    ) -> tuple[dict[str, Binding], list[str]]:
    """Names bound by the ``import`` and ``from`` statements given and by definitions (given by name),
    and the modules of star imports."""
    names: dict[str, Binding] = {}
    stars: list[str] = []
    for stmt in statements:
        if isinstance(stmt, str):
            names[stmt] = ("def", stmt)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    names[alias.asname] = ("module", alias.name)
                else:
                    top = alias.name.split(".")[0]
                    names[top] = ("module", top)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, is_package, stmt.level, stmt.module)
            if source is None:
                continue
            for alias in stmt.names:
                if alias.name == "*":
                    stars.append(source)
                else:
                    names[alias.asname or alias.name] = ("from", source, alias.name)
    return names, stars


class SourceReader:
    """Reads source files for one digest: each file's stamp taken once, each name resolved once.

    Args:
        readable: whether a file is worth reading to resolve names (the digest reads only the
            workspace's): a name re-exported through a file it refuses is not found, and that
            file's module is noted in :attr:`outside`.
    """

    def __init__(self, readable: Callable[[str], bool]) -> None:
        self.readable = readable
        self._stamps: dict[str, Stamp | None] = {}
        self._resolved: dict[tuple[str, str], StaticDef | str | None] = {}
        self.outside: set[str] = set()
        """Modules a name was looked up in whose files are not readable (installed packages, the
        standard library): what the code reaches beyond what it digests."""
        self.cut: str | None = None
        """Why a name was not followed to its definition though it may be readable (a chain of
        re-exports longer than the reader follows), if that happened."""

    def stamps(self) -> dict[str, Stamp | None]:
        """The stamp of every file this reader read (or looked at), for telling when one changes."""
        return dict(self._stamps)

    def stamp(self, path: str) -> Stamp | None:
        """:func:`file_stamp` of ``path``, taken once."""
        if path not in self._stamps:
            self._stamps[path] = file_stamp(path)
        return self._stamps[path]

    def source(self, path: str) -> FileSource | None:
        """:func:`file_source` of ``path``."""
        return file_source(path, self.stamp(path))

    def resolve(self, module: str, name: str, depth: int = 0) -> StaticDef | str | None:
        """What ``name`` in module ``module`` is, read from source: a definition, a module's name, or None."""
        key = (module, name)
        if key not in self._resolved:
            self._resolved[key] = None  # a cycle of re-exports resolves to nothing
            self._resolved[key] = self._resolve(module, name, depth)
        return self._resolved[key]

    def resolve_binding(self, binding: Binding, depth: int = 0) -> StaticDef | str | None:
        """What an ``import`` or ``from`` binding names: a definition, a module's name, or None."""
        if binding[0] == "module":
            return binding[1]
        if binding[0] == "from":
            return self.resolve(binding[1], binding[2], depth)
        return None

    def _resolve(self, module: str, name: str, depth: int) -> StaticDef | str | None:
        if depth > _RESOLVE_DEPTH:
            self.cut = self.cut or f"{module}.{name} is re-exported more than {_RESOLVE_DEPTH} times"
            return None
        path = module_file(module)
        if path is None or not self.readable(path):
            self.outside.add(module)
            return None
        source = self.source(path) if path else None
        if path is None or source is None:
            return None
        if module not in source.bindings:
            is_package = os.path.basename(path) == "__init__.py"
            source.bindings[module] = import_bindings(source.top, module, is_package)
        names, stars = source.bindings[module]
        binding = names.get(name)
        if binding is not None and binding[0] == "def":
            spans = source.spans.get(name)
            return StaticDef(path, module, name, spans[-1]) if spans else None
        if binding is not None:
            return self.resolve_binding(binding, depth + 1)
        for star in stars:
            target = self.resolve(star, name, depth + 1)
            if target is not None:
                return target
        is_package = os.path.basename(path) == "__init__.py"
        return f"{module}.{name}" if is_package and module_file(f"{module}.{name}") else None


@functools.lru_cache(maxsize=8192)
def in_roots(file: str, roots: tuple[str, ...]) -> bool:
    """Whether ``file`` lies under ``roots``, outside the standard library and installed packages."""
    path = realpath(file)
    if any(_under(path, folder) for folder in _installed_folders()):
        return False
    parts = path.split(os.sep)
    return "site-packages" not in parts and "dist-packages" not in parts \
        and any(_under(path, root) for root in roots)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=4096)
def realpath(path: str) -> str:
    """``os.path.realpath``, cached."""
    return os.path.realpath(path)


@functools.cache
def _installed_folders() -> tuple[str, ...]:
    """The standard library's and installed packages' folders."""
    paths = sysconfig.get_paths()
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(sorted({os.path.realpath(paths[key]) for key in keys if key in paths}))
