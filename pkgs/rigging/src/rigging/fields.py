"""Dataclass fields that describe how a value is produced without changing what it is.

A config class marks such a field with :func:`unhashed_field` (logging frequency, prefetch depth,
a local cache folder, a run's display name); whatever derives an identity from the config
(marin's step hash, its "what changed" diff) leaves those fields out. The mark lives here, at the
bottom layer, so the configs of every package can use it without importing the engine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ADDED", "UNHASHED", "added_field", "in_hash", "is_hashed", "unhashed_field"]

UNHASHED = "marin.unhashed"
"""The ``dataclasses.field`` metadata key set by :func:`unhashed_field`."""


def unhashed_field(**kwargs: Any) -> Any:
    """A dataclass field that does not affect the result and so stays out of any hash of the config.

    Takes the keywords of ``dataclasses.field``::

        log_every: int = unhashed_field(default=10)
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[UNHASHED] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def is_hashed(field: dataclasses.Field) -> bool:
    """Whether ``field`` is part of its config's identity (not marked by :func:`unhashed_field`)."""
    return not field.metadata.get(UNHASHED, False)


ADDED = "marin.added"
"""The ``dataclasses.field`` metadata key set by :func:`added_field`."""


def added_field(**kwargs: Any) -> Any:
    """A field added to a config class after builds of it exist: it enters the config's identity
    only when it differs from its default, so every build made before it was added keeps its hash.

    Takes the keywords of ``dataclasses.field`` (a ``default`` or ``default_factory`` is required)::

        eval_tasks: tuple[str, ...] = added_field(default=())
    """
    if "default" not in kwargs and "default_factory" not in kwargs:
        raise TypeError("added_field needs a default (the value every earlier build had)")
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[ADDED] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def in_hash(field: dataclasses.Field, value: Any) -> bool:
    """Whether ``field``, holding ``value``, enters its config's identity: a hashed field does,
    an :func:`added_field` only when ``value`` differs from its default."""
    if not is_hashed(field):
        return False
    if not field.metadata.get(ADDED, False):
        return True
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
    return value != default
