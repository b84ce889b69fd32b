"""Environment variables set for a while, then put back as they were."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

__all__ = ["updated_environ"]


@contextlib.contextmanager
def updated_environ(env: Mapping[str, str] | None) -> Iterator[None]:
    """Set ``env`` in ``os.environ`` inside the ``with`` block; on leaving it, give each of those
    variables back its earlier value, or remove it where it was not set."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old
