"""The one traversal of step configs: what is a container, what is a placeholder, what is a leaf.

Hashing (``encode``), dependencies (``dependencies_of``), provenance (``config_to_json``), the
plan's field diff (``flatten_config``) and the resolution of placeholders to real paths just
before ``fn`` runs all classify a value with :func:`kind_of` and descend with :func:`items_of`,
so they agree on every container kind: a placeholder a hash counts as a dependency is one that
resolution replaces.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePath
from typing import Any

from marin.execution.lazy import Lazy
from marin.execution.step import OutputPath, Step
from rigging.secrets import Secret

__all__ = ["Kind", "iter_placeholders", "items_of", "kind_of", "map_placeholders", "placeholder_step", "with_real_paths"]


class Kind(enum.Enum):
    """How the walker treats a value."""

    LEAF = "leaf"
    PLACEHOLDER = "placeholder"  # output_path_of(step, sub), a Step or a lazy handle
    DATACLASS = "dataclass"
    MAPPING = "mapping"
    LIST = "list"
    TUPLE = "tuple"
    SET = "set"  # set or frozenset


_LEAVES = (str, bytes, int, float, bool, enum.Enum, PurePath, Secret)


def kind_of(value: Any) -> Kind:
    """The kind of ``value``; a ``Secret`` is a leaf (its value is never walked)."""
    if value is None or isinstance(value, _LEAVES):
        return Kind.LEAF
    if isinstance(value, OutputPath | Step | Lazy):
        return Kind.PLACEHOLDER
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return Kind.DATACLASS
    if isinstance(value, Mapping):
        return Kind.MAPPING
    if isinstance(value, list):
        return Kind.LIST
    if isinstance(value, tuple):
        return Kind.TUPLE
    if isinstance(value, set | frozenset):
        return Kind.SET
    return Kind.LEAF


def items_of(value: Any, kind: Kind) -> list[tuple[Any, Any]]:
    """The children of a container as ``(key, child)``: a dataclass's ``Field`` (every field, the
    caller skips unhashed ones), a mapping's key, a sequence's index, None for a set member."""
    if kind is Kind.DATACLASS:
        return [(f, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if kind is Kind.MAPPING:
        return list(value.items())
    if kind is Kind.LIST or kind is Kind.TUPLE:
        return list(enumerate(value))
    if kind is Kind.SET:
        return [(None, v) for v in value]
    return []


def placeholder_step(value: Any, where: str = "config") -> tuple[Step, str]:
    """The step a placeholder stands for and the sub-path inside its output ("" for the whole)."""
    from marin.execution.hashing import UnserializableConfig

    target, sub_path = (value.step, value.sub_path) if isinstance(value, OutputPath) else (value, "")
    if isinstance(target, Lazy):
        target = target.lower()
    if not isinstance(target, Step):
        raise UnserializableConfig(f"{where}: output_path_of needs a Step or a lazy handle, got {type(target).__name__}")
    return target, sub_path


def iter_placeholders(value: Any, where: str = "config") -> Iterator[tuple[Step, str]]:
    """Every placeholder in ``value`` as ``(step, sub_path)``, depth first, in field order."""
    stack = [value]
    # Explicit stack: configs are shallow, but nothing here should depend on recursion limits.
    while stack:
        v = stack.pop()
        kind = kind_of(v)
        if kind is Kind.PLACEHOLDER:
            yield placeholder_step(v, where)
        elif kind is not Kind.LEAF:
            stack.extend(child for _, child in reversed(items_of(v, kind)))


def map_placeholders(value: Any, replace: Callable[[Step, str], Any]) -> Any:
    """``value`` with every placeholder replaced by ``replace(step, sub_path)``.

    Containers are rebuilt only where something inside them changed (a dataclass by
    ``dataclasses.replace``, fields outside ``__init__`` set after); the rest is returned as is.
    """
    kind = kind_of(value)
    if kind is Kind.PLACEHOLDER:
        return replace(*placeholder_step(value))
    if kind is Kind.LEAF:
        return value
    items = items_of(value, kind)
    new = [(key, map_placeholders(child, replace)) for key, child in items]
    if all(a is b for (_, a), (_, b) in zip(items, new, strict=True)):
        return value
    if kind is Kind.DATACLASS:
        changed = {f: v for (f, old), (_, v) in zip(items, new, strict=True) if v is not old}
        out = dataclasses.replace(value, **{f.name: v for f, v in changed.items() if f.init})
        for f, v in changed.items():
            if not f.init:
                object.__setattr__(out, f.name, v)
        return out
    if kind is Kind.MAPPING:
        return dict(new)
    if kind is Kind.LIST:
        return type(value)(v for _, v in new)
    if kind is Kind.TUPLE:
        return tuple(v for _, v in new)
    return type(value)(v for _, v in new)


def with_real_paths(config: Any, paths: Mapping[int, str]) -> Any:
    """The config ``fn`` receives: every placeholder replaced by the real path of its output."""
    from rigging import filesystem as fs

    def real(step: Step, sub_path: str) -> str:
        base = paths[id(step)]
        return fs.join(base, sub_path) if sub_path else base

    return map_placeholders(config, real)
