"""Where a step or a handle was defined (``file:line`` of the user's code that made it): for
messages that must point at one of two definitions, never part of a hash.

A site is recorded when the object is made, from the call stack, by walking out of the frames
that build steps on a caller's behalf: this library's own (``marin.*``), code Python generates
(a dataclass's ``__init__``), the standard modules that make objects for their caller
(``dataclasses.replace``, ``copy``, ``typing``'s generic aliases), and modules of helpers that
say so with a module-level ``__marin_helpers__ = True`` (Marin's ``experiments.defaults``). It
costs a few frame hops per object, and lives in the object's ``__dict__`` (not a dataclass field),
so no walk of a config or a step's fields ever sees it.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any

__all__ = ["HELPERS_MARK", "Site", "keep_site", "record_site", "site_of"]

Site = tuple[str, int]
"""``(file, line)``."""

HELPERS_MARK = "__marin_helpers__"
"""A module-level name: a module that sets it true builds steps for its callers, and a step it
builds is said to be defined where that module's function was called."""

_ATTR = "_site"
_MAKERS = frozenset({"dataclasses", "copy", "copyreg", "typing", "abc", "functools"})
_WALKED_OUT_OF: dict[CodeType, bool] = {}
"""Whether frames of a code object are walked out of, decided once per code object: the walk
costs a dictionary lookup a frame (a no-op ``marin run`` makes thousands of steps)."""


def _makes_for_caller(globals_: dict[str, Any], filename: str) -> bool:
    name = globals_.get("__name__") or ""
    return (name == "marin" or name.startswith("marin.") or name in _MAKERS or filename.startswith("<")
            or bool(globals_.get(HELPERS_MARK)))


def record_site(obj: Any) -> None:
    """Record on ``obj`` the innermost frame of the call stack that is not one of those that build
    objects for their caller (see the module docstring); nothing when every frame is one."""
    frame = sys._getframe(1)  # the cheap way to the caller's line: no list of the whole stack
    while frame is not None:
        code = frame.f_code
        skip = _WALKED_OUT_OF.get(code)
        if skip is None:
            skip = _WALKED_OUT_OF[code] = _makes_for_caller(frame.f_globals, code.co_filename)
        if not skip:
            object.__setattr__(obj, _ATTR, (code.co_filename, frame.f_lineno))
            return
        frame = frame.f_back


def site_of(obj: Any) -> Site | None:
    """Where ``obj`` was defined (``(file, line)``), or None when not known."""
    return getattr(obj, "__dict__", {}).get(_ATTR)


def keep_site(copy: Any, original: Any) -> None:
    """Give ``copy`` (a changed copy of ``original``, made by the library) ``original``'s site."""
    site = site_of(original)
    if site is not None:
        object.__setattr__(copy, _ATTR, site)
