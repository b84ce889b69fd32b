"""The one traversal of step configs: what is a container, what is a placeholder, what is a leaf.

Hashing (``encode``), dependencies (``dependencies_of``), provenance (``config_to_json``), the
plan's field diff (``flatten_config``), the resolution of placeholders to real paths just
before ``fn`` runs, and the executor adapter's conversion of Marin's markers all classify a value
with :func:`kind_of` and descend with :func:`items_of`, so they agree on every container kind: a
placeholder a hash counts as a dependency is one that resolution replaces.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.placeholders import Placeholder
from marin.execution.core.sites import keep_site
from marin.execution.core.sources import Source
from rigging import filesystem as fs
from rigging.secrets import Secret

if TYPE_CHECKING:
    from marin.execution.core.step import Step

__all__ = ["Kind", "iter_placeholders", "items_of", "kind_of", "map_children", "map_nodes", "map_placeholders", "placeholder_step", "sources_in", "with_real_paths"]


class Kind(enum.Enum):
    """How the walker treats a value."""

    LEAF = "leaf"
    PLACEHOLDER = "placeholder"  # a Placeholder: output_path_of(step, sub), a Step or a lazy handle
    SOURCE = "source"  # a Source: an external input, fingerprinted for the hash, its spec for fn
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
    if isinstance(value, Placeholder):
        return Kind.PLACEHOLDER
    if isinstance(value, Source):
        return Kind.SOURCE
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


def placeholder_step(value: Placeholder, where: str = "config") -> tuple[Step, str]:
    """The step a placeholder stands for and the sub-path inside its output ("" for the whole);
    ``where`` names the config field in the error when it stands for something that is not a step."""
    try:
        return value.target()
    except UnserializableConfig as e:
        raise UnserializableConfig(f"{where}: {e}") from None


def iter_placeholders(value: Any, where: str = "config") -> Iterator[tuple[Step, str]]:
    """Every placeholder in ``value`` as ``(step, sub_path)``, depth first, in field order."""
    stack = [value]
    # Explicit stack: configs are shallow, but nothing here should depend on recursion limits.
    while stack:
        v = stack.pop()
        kind = kind_of(v)
        if kind is Kind.PLACEHOLDER:
            yield placeholder_step(v, where)
        elif kind is not Kind.LEAF and kind is not Kind.SOURCE:
            stack.extend(child for _, child in reversed(items_of(v, kind)))


def sources_in(value: Any) -> list[Source]:
    """Every :class:`Source` in ``value``, depth first, in field order (duplicates kept)."""
    out: list[Source] = []
    stack = [value]
    while stack:
        v = stack.pop()
        kind = kind_of(v)
        if kind is Kind.SOURCE:
            out.append(v)
        elif kind is not Kind.LEAF and kind is not Kind.PLACEHOLDER:
            stack.extend(child for _, child in reversed(items_of(v, kind)))
    return out


def map_nodes(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``value`` with ``convert`` applied to every node, top down.

    ``convert`` returns a replacement for the node, or the node itself to go on: into it when it is
    a container, past it when it is a leaf or a placeholder (a step's own config is its own).
    Containers are rebuilt only where something inside them changed (see :func:`map_children`).
    """
    new_value = convert(value)
    if new_value is not value:
        return new_value
    kind = kind_of(value)
    if kind is Kind.LEAF or kind is Kind.PLACEHOLDER or kind is Kind.SOURCE:
        return value
    return map_children(value, kind, lambda child: map_nodes(child, convert))


def map_children(value: Any, kind: Kind, fn: Callable[[Any], Any]) -> Any:
    """The container ``value`` (of ``kind``) with ``fn`` applied to each child.

    Rebuilt only where a child changed: a dataclass by ``dataclasses.replace`` (fields outside
    ``__init__`` set after), a mapping as a dict, a list or set as its own type, a tuple as a tuple.
    """
    items = items_of(value, kind)
    new = [(key, fn(child)) for key, child in items]
    if all(a is b for (_, a), (_, b) in zip(items, new, strict=True)):
        return value
    if kind is Kind.DATACLASS:
        changed = {f: v for (f, old), (_, v) in zip(items, new, strict=True) if v is not old}
        out = dataclasses.replace(value, **{f.name: v for f, v in changed.items() if f.init})
        for f, v in changed.items():
            if not f.init:
                object.__setattr__(out, f.name, v)
        keep_site(out, value)  # a copy of a step or handle is defined where the original was
        return out
    if kind is Kind.MAPPING:
        return dict(new)
    if kind is Kind.LIST:
        return type(value)(v for _, v in new)
    if kind is Kind.TUPLE:
        return tuple(v for _, v in new)
    return type(value)(v for _, v in new)


def map_placeholders(value: Any, replace: Callable[[Step, str], Any]) -> Any:
    """``value`` with every placeholder replaced by ``replace(step, sub_path)`` (see :func:`map_nodes`)."""
    return map_nodes(value, lambda v: replace(*placeholder_step(v)) if kind_of(v) is Kind.PLACEHOLDER else v)


def with_real_paths(config: Any, paths: Mapping[int, str]) -> Any:
    """The config ``fn`` receives: every placeholder replaced by the real path of its output, every
    source by its spec (a path, URL or Hub id string)."""

    def real(value: Any) -> Any:
        kind = kind_of(value)
        if kind is Kind.SOURCE:
            return value.spec
        if kind is not Kind.PLACEHOLDER:
            return value
        step, sub_path = placeholder_step(value)
        base = paths[id(step)]
        return fs.join(base, sub_path) if sub_path else base

    return map_nodes(config, real)
