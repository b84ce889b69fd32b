"""The canonical encoding of JSON values, and a hash of keys that is the same in every process.

A shuffle must send equal keys to the same partition whichever process computes them, so it
never uses Python's ``hash()`` (salted per process for strings, see ``PYTHONHASHSEED``). Keys and
records are encoded as canonical JSON instead: object keys sorted, no whitespace, UTF-8 (not
``\\u`` escapes), no NaN or infinity. Python floats print the shortest text that reads back
as the same number, so the encoding is a function of the value alone. Tuples encode as lists (and
so equal them); ``1``, ``1.0`` and ``True`` are three different keys.

:func:`stable_hash` is XXH3 (64 bits, seed 0) of that encoding.
"""

from __future__ import annotations

import json
from typing import Any

import xxhash

__all__ = ["encode_json", "stable_hash"]

_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def encode_json(value: Any, what: str = "value") -> bytes:
    """The canonical JSON encoding of ``value`` as UTF-8 bytes (see the module docstring).

    Args:
        value: a JSON value: str, int, float, bool, None, or lists, tuples and str-keyed dicts of them.
        what: what ``value`` is, for the error message (``"group_by key"``, ``"record"``).

    Raises:
        TypeError: ``value`` holds something JSON cannot encode (bytes, a set, an object).
        ValueError: ``value`` holds NaN or an infinity, or a string that is not valid Unicode.
    """
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except TypeError as e:
        raise TypeError(f"a {what} must be a JSON value, got {type(value).__name__}: {e}") from None
    except ValueError as e:
        raise ValueError(f"a {what} must be a JSON value, got {type(value).__name__}: {e}") from None


def stable_hash(key: Any) -> int:
    """A 64-bit hash of ``key``'s canonical encoding: equal in every process, run and machine."""
    return xxhash.xxh3_64_intdigest(encode_json(key, "key"))
