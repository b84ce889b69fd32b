"""Dataclass fields that describe how a value is produced without changing what it is.

A config class marks such a field with :func:`unhashed_field` (logging frequency, prefetch depth,
a local cache folder, a run's display name); whatever derives an identity from the config
(marin's step hash, its "what changed" diff) leaves those fields out. The mark lives here, at the
bottom layer, so the configs of every package can use it without importing the engine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["UNHASHED", "is_hashed", "unhashed_field"]

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
