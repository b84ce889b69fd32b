"""Content hashes of steps: a canonical, type-tagged encoding, never pickles.

A step's key covers the key-schema version, its name, ``fn``'s identity, ``version``, every
hashed config field, and each dependency's *hash* (never its path). Prefixes, resources, secret
values, unhashed fields, hosts and absolute workspace paths stay out.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from marin.execution.lazy import Lazy
from marin.execution.step import UNHASHED, InvalidStep, OutputPath, Step
from marin.execution.walk import Kind, items_of, iter_placeholders, kind_of, placeholder_step

__all__ = [
    "KEY_SCHEMA",
    "UnserializableConfig",
    "collect_graph",
    "config_to_json",
    "dependencies_of",
    "describe_encoded",
    "encode",
    "flatten_config",
    "fn_identity",
    "hash_graph",
    "holds_dependency",
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


def _tag_path(value: str) -> list[Any]:
    root = workspace_root()
    if root and os.path.isabs(value):
        norm = os.path.normpath(value)
        if norm == root or norm.startswith(root + os.sep):
            return ["wspath", os.path.relpath(norm, root).replace(os.sep, "/")]
    return ["str", value]


def _encode_leaf(value: Any, hashes: Mapping[int, str], where: str) -> Any:
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
    if isinstance(value, PurePath):
        return ["path", _tag_path(str(value))[1]]
    if callable(value) and hasattr(value, "__qualname__") and "<" not in value.__qualname__:
        return ["fn", fn_identity(value)]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and type(value).__module__ == "numpy":
        return encode(item(), hashes, where)
    raise UnserializableConfig(
        f"{where}: value of type {type(value).__module__}.{type(value).__qualname__} cannot be part of a step "
        "config (use numbers, strings, lists, dicts, enums, frozen dataclasses, Secrets or output_path_of)"
    )


def encode(value: Any, hashes: Mapping[int, str], where: str = "config") -> Any:
    """The canonical, type-tagged encoding of ``value`` as JSON-ready lists.

    ``hashes`` maps ``id(step)`` to the hash of every step the value refers to.
    """
    kind = kind_of(value)
    if kind is Kind.LEAF:
        return _encode_leaf(value, hashes, where)
    if kind is Kind.PLACEHOLDER:
        step, sub_path = placeholder_step(value, where)
        return ["dep", hashes[id(step)], sub_path]
    items = items_of(value, kind)
    if kind is Kind.DATACLASS:
        fields = [[f.name, encode(v, hashes, f"{where}.{f.name}")] for f, v in items if not f.metadata.get(UNHASHED)]
        return ["dc", qualified_name(type(value)), fields]
    if kind is Kind.MAPPING:
        pairs = []
        for k, v in items:
            if not isinstance(k, str | int | bool | enum.Enum) and k is not None:
                raise UnserializableConfig(f"{where}: dict key {k!r} of type {type(k).__name__} is not allowed")
            pairs.append([encode(k, hashes, where), encode(v, hashes, f"{where}[{k!r}]")])
        pairs.sort(key=lambda kv: json.dumps(kv[0]))
        return ["dict", pairs]
    if kind is Kind.SET:
        encoded = [encode(v, hashes, where) for _, v in items]
        encoded.sort(key=json.dumps)
        return ["set", encoded]
    return ["list" if kind is Kind.LIST else "tuple", [encode(v, hashes, f"{where}[{i}]") for i, v in items]]


def holds_dependency(encoded: str) -> bool:
    """True when a recorded field's encoding (a :func:`flatten_config` value) holds a placeholder
    (``["dep", hash, sub_path]``): it points at another step's output."""
    try:
        stack = [json.loads(encoded)]
    except ValueError:
        return False
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            if len(value) == 3 and value[0] == "dep" and isinstance(value[1], str):
                return True
            stack.extend(value)
    return False


def describe_encoded(value: Any, names: Mapping[str, str] | None = None, limit: int = 80) -> str:
    """An :func:`encode`-d value as a short readable string (a dependency by its output's name when
    ``names`` maps its hash to a step name), cut to ``limit`` characters."""
    text = _describe(value, names or {})
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe(value: Any, names: Mapping[str, str]) -> str:
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        return json.dumps(value)
    tag, rest = value[0], value[1:]
    if tag == "none":
        return "none"
    if tag in ("str", "wspath", "path"):
        return json.dumps(rest[0])
    if tag == "int":
        return str(rest[0])
    if tag == "bool":
        return str(rest[0]).lower()
    if tag == "float":
        return "nan" if rest[0] == "nan" else repr(float.fromhex(rest[0]))
    if tag == "fn":
        return str(rest[0])
    if tag == "secret":
        return f"secret({rest[0]})"
    if tag == "bytes":
        return f"<{len(rest[0]) // 2} bytes>"
    if tag == "enum":
        return _describe(rest[1], names)
    if tag == "dep":
        digest, sub_path = rest
        name = f"{names.get(digest, 'step')}-{digest[:8]}"
        return f"{name}/{sub_path}" if sub_path else name
    if tag == "dc":
        cls = rest[0].rsplit(":", 1)[-1].rsplit(".", 1)[-1]
        return f"{cls}(" + ", ".join(f"{k}={_describe(v, names)}" for k, v in rest[1]) + ")"
    if tag == "dict":
        return "{" + ", ".join(f"{_describe(k, names)}: {_describe(v, names)}" for k, v in rest[0]) + "}"
    if tag == "set":
        return "{" + ", ".join(_describe(v, names) for v in rest[0]) + "}"
    if tag in ("list", "tuple"):
        return "[" + ", ".join(_describe(v, names) for v in rest[0]) + "]"
    return json.dumps(value)


def _as_step(value: Any, where: str) -> Step:
    if isinstance(value, Step | Lazy):
        return placeholder_step(value, where)[0]
    raise UnserializableConfig(f"{where}: output_path_of needs a Step or a lazy handle, got {type(value).__name__}")


def dependencies_of(step: Step) -> list[Step]:
    """The steps ``step``'s config refers to, in first-seen order, without duplicates."""
    cached = step.__dict__.get("_deps")
    if cached is not None:
        return cached
    deps: list[Step] = []
    seen: set[int] = set()
    for target, _ in iter_placeholders(step.config, f"{step.name}.config"):
        if id(target) not in seen:
            seen.add(id(target))
            deps.append(target)
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


def hash_graph(roots: Iterable[Step | Lazy], salt: str | None = None, *,
               graph: Sequence[Step] | None = None) -> dict[int, str]:
    """Hash every step reachable from ``roots``; returns ``{id(step): hex digest}``.

    Without ``salt`` the digests are also memoised on the steps (``step.hash``). With one (the
    environment fingerprint of ``--strict-env``) they are returned only. ``graph``: the steps
    :func:`collect_graph` returned for ``roots``, when the caller has them (not walked again).
    """
    hashes: dict[int, str] = {}
    for step in graph if graph is not None else collect_graph(roots):
        if salt is None and "_hash" in step.__dict__:
            hashes[id(step)] = step.__dict__["_hash"]
            continue
        digest = hashlib.sha256(step_key(step, hashes, salt).encode("utf-8")).hexdigest()
        hashes[id(step)] = digest
        if salt is None:
            object.__setattr__(step, "_hash", digest)
    return hashes


def _leaf_to_json(value: Any) -> Any:
    from rigging.secrets import Secret

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return config_to_json(value.value)
    if isinstance(value, Secret):
        return f"<secret:{value.name}>"
    if isinstance(value, PurePath | bytes):
        return str(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return fn_identity(value)
    return repr(value)


def config_to_json(value: Any, paths: Mapping[int, str] | None = None) -> Any:
    """A readable JSON form of a config for provenance: secrets redacted, placeholders as paths."""
    paths = paths or {}
    kind = kind_of(value)
    if kind is Kind.LEAF:
        return _leaf_to_json(value)
    if kind is Kind.PLACEHOLDER:
        step, sub_path = placeholder_step(value)
        base = paths.get(id(step), f"<output of {step.name}>")
        if not isinstance(value, OutputPath):
            return base
        return base.rstrip("/") + ("/" + sub_path if sub_path else "")
    items = items_of(value, kind)
    if kind is Kind.DATACLASS:
        return {f.name: config_to_json(v, paths) for f, v in items}
    if kind is Kind.MAPPING:
        return {str(k): config_to_json(v, paths) for k, v in items}
    return [config_to_json(v, paths) for _, v in items]


def flatten_config(value: Any, hashes: Mapping[int, str], prefix: str = "",
                   dependency_keys: set[str] | None = None) -> dict[str, str]:
    """Hashed config fields as ``{"dotted.path": canonical text}``, for "what changed" diffs.

    Dataclasses and string-keyed mappings are descended; anything else is one entry. The keys of
    entries holding a placeholder (a dependency) are added to ``dependency_keys`` when given.
    """
    out: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, v = stack.pop()
        kind = kind_of(v)
        if kind is Kind.DATACLASS:
            for f, child in items_of(v, kind):
                if not f.metadata.get(UNHASHED):
                    stack.append((f"{path}.{f.name}" if path else f.name, child))
        elif kind is Kind.MAPPING and v and all(isinstance(k, str) for k in v):
            for k, child in items_of(v, kind):
                stack.append((f"{path}.{k}" if path else k, child))
        else:
            key = path or "<config>"
            out[key] = json.dumps(encode(v, hashes, path or "config"), separators=(",", ":"))
            if dependency_keys is not None and next(iter_placeholders(v), None) is not None:
                dependency_keys.add(key)
    return out
