"""Where a live class is defined, as the code digest names and reads it
(``marin.execution.store.code_digest``), whatever else the process imported.

A function says where its code lives (its globals' ``__name__``, its code's file); a class says it
only through ``__module__``, which a moved class keeps at its old module name
(:func:`marin.execution.core.identity.keep_identity`). That old name is in ``sys.modules`` only in a
process that imported it (a build worker running an experiment written against Marin's old paths,
not the planner), so ``sys.modules[cls.__module__]`` would give a class a file, a name and globals
in one process and none in another, and the digest of every step reaching it would differ with
import order.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from marin.execution.store.code_source import file_source, file_stamp

__all__ = ["defining_module"]


def defining_module(cls: type) -> types.ModuleType | None:
    """The loaded module whose source file defines ``cls``, or None (a builtin, a class made at run time).

    The module ``__module__`` names when it holds ``cls`` and its file defines it (almost always),
    else the first by name of the loaded modules that do. Cached per class.
    """
    cached = _HOMES.get(id(cls))
    if cached is not None and cached[0] is cls:
        return cached[1]
    said = sys.modules.get(getattr(cls, "__module__", None) or "")
    if _home(said, cls):
        found = said
    else:  # the loaded modules sorted by name only when the one it names is not its home (rarely)
        found = next((m for _, m in sorted(list(sys.modules.items()), key=lambda item: item[0]) if _home(m, cls)), None)
    _HOMES[id(cls)] = (cls, found)
    return found


_HOMES: dict[int, tuple[type, types.ModuleType | None]] = {}


def _home(module: Any, cls: type) -> bool:
    """Whether ``module`` is a module that holds ``cls`` and whose file defines it."""
    return isinstance(module, types.ModuleType) and _holds(module, cls) and _defines(module, cls.__qualname__)


def _holds(module: types.ModuleType, cls: type) -> bool:
    """Whether ``module`` holds ``cls`` under its qualified name (its own dictionaries: nothing imported)."""
    value: Any = module
    for part in cls.__qualname__.split("."):
        value = vars(value).get(part) if isinstance(value, types.ModuleType | type) else None
    return value is cls


def _defines(module: types.ModuleType, qualname: str) -> bool:
    """Whether ``module``'s source file has a definition of ``qualname``."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not os.path.isabs(file):
        return False
    source = file_source(file, file_stamp(file))
    return source is not None and qualname in source.spans
