"""The canonical, type-tagged encoding of configs (never pickles), and the readable forms of it:
provenance JSON, the flattened fields of "what changed", short descriptions."""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.identity import fn_identity, qualified_name, workspace_root
from marin.execution.core.placeholders import OutputPath
from marin.execution.core.sources import Source
from marin.execution.core.walk import Kind, items_of, iter_placeholders, kind_of, placeholder_step
from rigging.fields import in_hash
from rigging.secrets import Secret

if TYPE_CHECKING:
    from marin.execution.core.step import Step

__all__ = ['ConfigWalk', 'config_to_json', 'config_walk', 'describe_encoded', 'encode', 'flatten_config', 'holds_dependency']


def _tag_path(value: str) -> list[Any]:
    root = workspace_root()
    if root and os.path.isabs(value):
        norm = os.path.normpath(value)
        if norm == root or norm.startswith(root + os.sep):
            return ["wspath", os.path.relpath(norm, root).replace(os.sep, "/")]
    return ["str", value]


def _encode_leaf(value: Any, enc: _Encoder, where: str) -> Any:
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, enum.Enum):
        cls = type(value)
        return ["enum", qualified_name(cls), enc.encode(value.value, where, walked=False)]
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
        return enc.encode(item(), where, walked=False)
    raise UnserializableConfig(
        f"{where}: value of type {type(value).__module__}.{type(value).__qualname__} cannot be part of a step "
        "config (use numbers, strings, lists, dicts, enums, frozen dataclasses, Secrets or output_path_of)"
    )


class _Dep:
    """A placeholder in an encoding made before the hashes are known: ``["dep", hash, sub_path]``
    once they are (:meth:`ConfigWalk.dumps`)."""

    __slots__ = ("step", "sub_path")

    def __init__(self, step: Step, sub_path: str):
        self.step = step
        self.sub_path = sub_path


class _Unsorted:
    """A set's members (or a dict's pairs) whose order depends on hashes not known yet: sorted, as
    :func:`encode` sorts them, once they are."""

    __slots__ = ("pairs", "tag", "values")

    def __init__(self, tag: str, values: list[Any], pairs: bool):
        self.tag = tag
        self.values = values
        self.pairs = pairs

    def sorted(self, fill: Callable[[Any], Any]) -> list[Any]:
        def order(v: Any) -> str:
            return json.dumps(v[0] if self.pairs else v, default=fill)

        return [self.tag, sorted(self.values, key=order)]


class _Encoder:
    """One walk of a config: its encoding, and the steps it reads (the placeholders
    :func:`~marin.execution.core.walk.iter_placeholders` finds, in its order).

    With ``hashes`` a dependency is encoded with its hash; without, it is left open (:class:`_Dep`).
    """

    def __init__(self, hashes: Mapping[int, str] | None, deps_where: str = "config"):
        self.hashes = hashes
        self.deps: list[Step] = []
        self.sources: list[Source] = []
        """The external inputs the config reads, first-seen order, no duplicates."""
        self._seen: set[int] = set()
        self._deps_where = deps_where
        self.open = 0
        """Dependencies left open so far."""
        self.error: UnserializableConfig | None = None
        """The first value the walk could not encode (raised when the config is hashed)."""

    def _unencodable(self, error: UnserializableConfig) -> Any:
        # Encoding with hashes fails at once. The walk keeps going: finding a step's dependencies
        # never failed on a value it cannot encode (--only, for one, names steps before hashing).
        if self.hashes is not None:
            raise error
        self.error = self.error or error
        return ["unencodable"]

    def _depend(self, step: Step) -> None:
        if id(step) not in self._seen:
            self._seen.add(id(step))
            self.deps.append(step)

    def _placeholder(self, value: Any, where: str, walked: bool) -> Any:
        if self.hashes is not None:
            step, sub_path = placeholder_step(value, where)
            return ["dep", self.hashes[id(step)], sub_path]
        # The dependency walk names a placeholder it cannot follow by the whole config, as
        # dependencies_of always has.
        step, sub_path = placeholder_step(value, self._deps_where if walked else where)
        if walked:
            self._depend(step)
        self.open += 1
        return _Dep(step, sub_path)

    def encode(self, value: Any, where: str, walked: bool = True) -> Any:
        """``value``'s encoding; ``walked``: where the dependency walk goes (not into dict keys or
        enum values), so that what it finds is a dependency."""
        kind = kind_of(value)
        if kind is Kind.LEAF:
            try:
                return _encode_leaf(value, self, where)
            except UnserializableConfig as e:
                return self._unencodable(e)
        if kind is Kind.PLACEHOLDER:
            return self._placeholder(value, where, walked)
        if kind is Kind.SOURCE:
            if value not in self.sources:
                self.sources.append(value)
            return ["source", _tag_path(value.spec), value.revision]
        items = items_of(value, kind)
        if kind is Kind.DATACLASS:
            fields = []
            for f, v in items:
                if in_hash(f, v):
                    fields.append([f.name, self.encode(v, f"{where}.{f.name}", walked)])
                elif walked and self.hashes is None:  # not hashed, but a step it reads is a dependency
                    for step, _sub_path in iter_placeholders(v, self._deps_where):
                        self._depend(step)
            return ["dc", qualified_name(type(value)), fields]
        if kind is Kind.MAPPING:
            pairs = []
            keys_open = False
            for k, v in items:
                before = self.open
                if not isinstance(k, str | int | bool | enum.Enum) and k is not None:
                    key = self._unencodable(
                        UnserializableConfig(f"{where}: dict key {k!r} of type {type(k).__name__} is not allowed"))
                else:
                    key = self.encode(k, where, walked=False)
                keys_open = keys_open or self.open != before
                pairs.append([key, self.encode(v, f"{where}[{k!r}]", walked)])
            if keys_open:
                return _Unsorted("dict", pairs, pairs=True)
            pairs.sort(key=lambda kv: json.dumps(kv[0]))
            return ["dict", pairs]
        if kind is Kind.SET:
            open_before = self.open
            encoded = [self.encode(v, where, walked) for _, v in items]
            if self.open != open_before:
                return _Unsorted("set", encoded, pairs=False)
            encoded.sort(key=json.dumps)
            return ["set", encoded]
        return ["list" if kind is Kind.LIST else "tuple", [self.encode(v, f"{where}[{i}]", walked) for i, v in items]]


def encode(value: Any, hashes: Mapping[int, str], where: str = "config") -> Any:
    """The canonical, type-tagged encoding of ``value`` as JSON-ready lists.

    ``hashes`` maps ``id(step)`` to the hash of every step the value refers to.
    """
    return _Encoder(hashes).encode(value, where)


class ConfigWalk:
    """What one walk of a step's config finds: the steps it reads (first-seen order, no
    duplicates) and its encoding with their hashes left open, to be filled once they are known.

    Hashing needs the dependencies before their hashes and the encoding after: one walk serves both.
    """

    __slots__ = ("_error", "_tree", "deps", "sources")

    def __init__(self, step: Step):
        enc = _Encoder(None, f"{step.name}.config")
        self._tree = enc.encode(step.config, f"{step.name}.config")
        self._error = enc.error
        self.deps: list[Step] = enc.deps
        self.sources: list[Source] = enc.sources

    def dumps(self, head: list[Any], tail: list[Any], hashes: Mapping[int, str]) -> str:
        """``json.dumps(head + [encoding] + tail)`` (compact, not ASCII-escaped), the encoding's
        dependencies named by ``hashes`` (``{id(step): hash}``): text equal to encoding anew.

        Raises:
            UnserializableConfig: the config holds a value that cannot be encoded.
        """
        if self._error is not None:
            raise UnserializableConfig(str(self._error))

        def fill(o: Any) -> Any:
            if type(o) is _Dep:
                return ["dep", hashes[id(o.step)], o.sub_path]
            if type(o) is _Unsorted:
                return o.sorted(fill)
            raise TypeError(f"{type(o).__name__} in a config encoding")

        return json.dumps([*head, self._tree, *tail], separators=(",", ":"), ensure_ascii=False, default=fill)


def config_walk(step: Step) -> ConfigWalk:
    """The walk of ``step``'s config, made once per step object (a step and its config are frozen)."""
    walk = step.__dict__.get("_walk")
    if walk is None:
        walk = ConfigWalk(step)
        object.__setattr__(step, "_walk", walk)
    return walk


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
    if tag == "source":
        spec = _describe(rest[0], names)
        return f"source({spec})" if rest[1] is None else f"source({spec}, revision={json.dumps(rest[1])})"
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


def _leaf_to_json(value: Any) -> Any:
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
    if kind is Kind.SOURCE:
        return value.spec
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
                if in_hash(f, child):
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
