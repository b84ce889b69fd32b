"""How the store's records (status, success, provenance) are read from and written as JSON.

Each record lists its attributes as :class:`RecordKey` values: the JSON key that spells one and
the values it accepts. New records carry ``"format": RECORD_FORMAT``; records written before that
(no ``format``) read the same. Keys this code does not know, and values of the wrong type, are kept
in the record's ``extra`` and written back as they were, so a newer or damaged record survives a
round trip through this code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ATTEMPT_FOLDER_KEY", "RECORD_FORMAT", "RecordKey", "fields_from", "is_bool", "is_dict", "is_int",
           "is_list", "is_number", "is_str", "json_of"]


RECORD_FORMAT = 1
"""The form of the status, success and provenance records this code writes (their ``format``
field). Records without one (format 0) were written before records carried it; they read the same."""
_FORMAT_KEY = "format"
ATTEMPT_FOLDER_KEY = "data"
"""The key under which the status and success records name their attempt folder."""


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_int(value: Any) -> bool:
    """An int, not a bool (``True`` is an int to Python)."""
    return type(value) is int


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def is_list(value: Any) -> bool:
    return isinstance(value, list)


@dataclass(frozen=True)
class RecordKey:
    """How one attribute of a record is spelled in its JSON, and which values it accepts."""

    attr: str
    key: str
    accepts: Callable[[Any], bool]
    always: bool = False
    """Written even when empty (None); otherwise left out then."""


def fields_from(data: Any, keys: tuple[RecordKey, ...]) -> dict[str, Any] | None:
    """The constructor arguments of a record from its JSON: each known key whose value has the
    expected type becomes its attribute; everything else (unknown keys, values of the wrong type)
    is kept in ``extra`` and written back as it was. None when ``data`` is not a JSON object."""
    if not isinstance(data, dict):
        return None
    rest = dict(data)
    version = rest.pop(_FORMAT_KEY, 0)
    kwargs: dict[str, Any] = {"format": version if is_int(version) else 0}
    for k in keys:
        if k.key in rest and (k.accepts(rest[k.key]) or (k.always and rest[k.key] is None)):
            kwargs[k.attr] = rest.pop(k.key)
    kwargs["extra"] = rest
    return kwargs


def json_of(record: Any, keys: tuple[RecordKey, ...]) -> dict[str, Any]:
    """The JSON of a record (one with ``extra``) whose attributes ``keys`` spell, in this code's format."""
    body: dict[str, Any] = dict(record.extra)
    for k in keys:
        if k.key in record.extra:
            continue  # a value read that the attribute could not hold: written back as it was
        value = getattr(record, k.attr)
        if k.always or (value is not None and value != ""):
            body[k.key] = value
    body[_FORMAT_KEY] = RECORD_FORMAT
    return body
