"""Content hashes of steps: a canonical, type-tagged encoding, never pickles.

A step's key covers the key-schema version, its name, ``fn``'s identity, ``version``, every
hashed config field, and each dependency's *hash* (never its path). Prefixes, resources, secret
values, unhashed fields, hosts and absolute workspace paths stay out.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import PurePath
from typing import Any

from marin.execution.lazy import Lazy
from marin.execution.step import UNHASHED, InvalidStep, OutputPath, Step

__all__ = [
    "KEY_SCHEMA",
    "UnserializableConfig",
    "collect_graph",
    "config_to_json",
    "dependencies_of",
    "encode",
    "flatten_config",
    "fn_identity",
    "hash_graph",
    "module_name_for_path",
    "workspace_root",
]

KEY_SCHEMA = "marin.step/v1"


class UnserializableConfig(InvalidStep):
    """A config holds a value with no canonical encoding; the message names the field."""


_ROOT_CACHE: dict[str, str | None] = {}


def workspace_root() -> str | None:
    """The workspace root (cached per working folder); absolute paths under it are hashed relative."""
    cwd = os.getcwd()
    if cwd not in _ROOT_CACHE:
        from rigging.config.discovery import find_workspace_root

        found = find_workspace_root(cwd)
        _ROOT_CACHE[cwd] = str(found) if found else None
    return _ROOT_CACHE[cwd]


def module_name_for_path(path: str) -> str:
    """The module name of a Python file: dotted path relative to the workspace root, else its stem."""
    from rigging.config.discovery import find_workspace_root

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
    if getattr(main, "__file__", None):
        return module_name_for_path(main.__file__)
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


def _tag_path(value: str) -> list[Any]:
    root = workspace_root()
    if root and os.path.isabs(value):
        norm = os.path.normpath(value)
        if norm == root or norm.startswith(root + os.sep):
            return ["wspath", os.path.relpath(norm, root).replace(os.sep, "/")]
    return ["str", value]


def encode(value: Any, hashes: Mapping[int, str], where: str = "config") -> Any:
    """The canonical, type-tagged encoding of ``value`` as JSON-ready lists.

    ``hashes`` maps ``id(step)`` to the hash of every step the value refers to.
    """
    from rigging.secrets import Secret

    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, enum.Enum):
        cls = type(value)
        return ["enum", qualified_name(cls), encode(value.value, hashes, where)]
    if isinstance(value, int):
        return ["int", str(value)]
    if isinstance(value, float):
        if math.isnan(value):
            return ["float", "nan"]
        return ["float", value.hex()]
    if isinstance(value, str):
        return _tag_path(value)
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    if isinstance(value, Secret):
        return ["secret", value.name]
    if isinstance(value, OutputPath):
        step = _as_step(value.step, where)
        return ["dep", hashes[id(step)], value.sub_path]
    if isinstance(value, Step | Lazy):
        step = _as_step(value, where)
        return ["dep", hashes[id(step)], ""]
    if isinstance(value, PurePath):
        return ["path", _tag_path(str(value))[1]]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        fields = [
            [f.name, encode(getattr(value, f.name), hashes, f"{where}.{f.name}")]
            for f in dataclasses.fields(value)
            if not f.metadata.get(UNHASHED)
        ]
        return ["dc", qualified_name(cls), fields]
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, str | int | bool | enum.Enum) and k is not None:
                raise UnserializableConfig(f"{where}: dict key {k!r} of type {type(k).__name__} is not allowed")
            items.append([encode(k, hashes, where), encode(v, hashes, f"{where}[{k!r}]")])
        items.sort(key=lambda kv: json.dumps(kv[0]))
        return ["dict", items]
    if isinstance(value, list | tuple):
        tag = "list" if isinstance(value, list) else "tuple"
        return [tag, [encode(v, hashes, f"{where}[{i}]") for i, v in enumerate(value)]]
    if isinstance(value, set | frozenset):
        encoded = [encode(v, hashes, where) for v in value]
        encoded.sort(key=json.dumps)
        return ["set", encoded]
    if callable(value) and hasattr(value, "__qualname__") and "<" not in value.__qualname__:
        return ["fn", fn_identity(value)]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and type(value).__module__ == "numpy":
        return encode(item(), hashes, where)
    raise UnserializableConfig(
        f"{where}: value of type {type(value).__module__}.{type(value).__qualname__} cannot be part of a step "
        "config (use numbers, strings, lists, dicts, enums, frozen dataclasses, Secrets or output_path_of)"
    )


def _as_step(value: Any, where: str) -> Step:
    if isinstance(value, Step):
        return value
    if isinstance(value, Lazy):
        return value.lower()
    raise UnserializableConfig(f"{where}: output_path_of needs a Step or a lazy handle, got {type(value).__name__}")


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, str | bytes | int | float | bool | enum.Enum) or value is None:
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield getattr(value, f.name)
    elif isinstance(value, Mapping):
        yield from value.values()
    elif isinstance(value, list | tuple | set | frozenset):
        yield from value


def dependencies_of(step: Step) -> list[Step]:
    """The steps ``step``'s config refers to, in first-seen order, without duplicates."""
    cached = step.__dict__.get("_deps")
    if cached is not None:
        return cached
    deps: list[Step] = []
    seen: set[int] = set()
    stack = [step.config]
    # Explicit stack: configs are shallow, but nothing here should depend on recursion limits.
    while stack:
        value = stack.pop()
        target = None
        if isinstance(value, OutputPath):
            target = _as_step(value.step, f"{step.name}.config")
        elif isinstance(value, Step | Lazy):
            target = _as_step(value, f"{step.name}.config")
        if target is not None:
            if id(target) not in seen:
                seen.add(id(target))
                deps.append(target)
            continue
        children = list(_children(value))
        stack.extend(reversed(children))
    object.__setattr__(step, "_deps", deps)
    return deps


def collect_graph(roots: Iterable[Step | Lazy]) -> list[Step]:
    """Every step reachable from ``roots``, dependencies before dependents (iterative DFS)."""
    order: list[Step] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = finished
    for root in roots:
        root_step = _as_step(root, "target")
        if state.get(id(root_step)) == 2:
            continue
        stack: list[tuple[Step, Iterator[Step]]] = [(root_step, iter(dependencies_of(root_step)))]
        state[id(root_step)] = 1
        while stack:
            step, it = stack[-1]
            advanced = False
            for dep in it:
                s = state.get(id(dep))
                if s == 2:
                    continue
                if s == 1:
                    raise InvalidStep(f"dependency cycle through step {dep.name!r}")
                state[id(dep)] = 1
                stack.append((dep, iter(dependencies_of(dep))))
                advanced = True
                break
            if not advanced:
                stack.pop()
                state[id(step)] = 2
                order.append(step)
    return order


def step_key(step: Step, hashes: Mapping[int, str], salt: str | None = None) -> str:
    """The canonical JSON text whose SHA-256 is the step's hash."""
    key = [
        KEY_SCHEMA,
        step.name,
        fn_identity(step.fn),
        step.version,
        encode(step.config, hashes, f"{step.name}.config"),
        sorted(hashes[id(d)] for d in dependencies_of(step)),
    ]
    if salt:
        key.append(["env", salt])
    return json.dumps(key, separators=(",", ":"), ensure_ascii=False)


def hash_graph(roots: Iterable[Step | Lazy], salt: str | None = None) -> dict[int, str]:
    """Hash every step reachable from ``roots``; returns ``{id(step): hex digest}``.

    Without ``salt`` the digests are also memoised on the steps (``step.hash``). With one (the
    environment fingerprint of ``--strict-env``) they are returned only.
    """
    hashes: dict[int, str] = {}
    for step in collect_graph(roots):
        if salt is None and "_hash" in step.__dict__:
            hashes[id(step)] = step.__dict__["_hash"]
            continue
        digest = hashlib.sha256(step_key(step, hashes, salt).encode("utf-8")).hexdigest()
        hashes[id(step)] = digest
        if salt is None:
            object.__setattr__(step, "_hash", digest)
    return hashes


def config_to_json(value: Any, paths: Mapping[int, str] | None = None) -> Any:
    """A readable JSON form of a config for provenance: secrets redacted, placeholders as paths."""
    from rigging.secrets import Secret

    paths = paths or {}
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return config_to_json(value.value, paths)
    if isinstance(value, Secret):
        return f"<secret:{value.name}>"
    if isinstance(value, OutputPath):
        step = _as_step(value.step, "config")
        base = paths.get(id(step), f"<output of {step.name}>")
        return base.rstrip("/") + ("/" + value.sub_path if value.sub_path else "")
    if isinstance(value, Step | Lazy):
        step = _as_step(value, "config")
        return paths.get(id(step), f"<output of {step.name}>")
    if isinstance(value, PurePath | bytes):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: config_to_json(getattr(value, f.name), paths) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): config_to_json(v, paths) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [config_to_json(v, paths) for v in value]
    if callable(value) and hasattr(value, "__qualname__"):
        return fn_identity(value)
    return repr(value)


def flatten_config(value: Any, hashes: Mapping[int, str], prefix: str = "") -> dict[str, str]:
    """Hashed config fields as ``{"dotted.path": canonical text}``, for "what changed" diffs."""
    out: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, OutputPath | Step | Lazy):
            out[path or "<config>"] = json.dumps(encode(v, hashes, path or "config"), separators=(",", ":"))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                if not f.metadata.get(UNHASHED):
                    stack.append((f"{path}.{f.name}" if path else f.name, getattr(v, f.name)))
        elif isinstance(v, Mapping) and v and all(isinstance(k, str) for k in v):
            for k, item in v.items():
                stack.append((f"{path}.{k}" if path else k, item))
        else:
            out[path or "<config>"] = json.dumps(encode(v, hashes, path or "config"), separators=(",", ":"))
    return out
