"""The messages between a worker pool (:mod:`fray.pool`) and its template process (:mod:`fray.pool_template`),
and between a warm process (:mod:`fray.warm_process`) and its caller.

One frozen dataclass per kind, pickled over the pair's socket. Both sides import them from here,
so a field added or renamed is one change, not two tuples that must agree by position.

The caller sends :class:`Prepare` once, then any of :class:`Run`, :class:`Learn` and
:class:`Retire`. The template answers a ``Run`` with :class:`Started` then :class:`Exited` (or with
:class:`Refused`), a ``Learn`` with :class:`Learned`, and a main script that made it unsafe to fork
with :class:`UnsafeMain` (and exits).

A warm process gets :class:`Prepare` (with :class:`WarmSettings`), then :class:`Run` and
:class:`Retire`; it answers a ``Run`` with :class:`Started`, :class:`Exited` once the call's result
is written, and :class:`Settled` once it has put itself back as it was before the call (or found
that it cannot, and exits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fray.template_imports import ModuleEntry

__all__ = [
    "Exited",
    "Learn",
    "Learned",
    "Prepare",
    "Refused",
    "Retire",
    "Run",
    "Started",
    "TemplateSettings",
    "ToCaller",
    "ToTemplate",
    "Settled",
    "UnsafeMain",
    "WarmSettings",
]


@dataclass(frozen=True)
class TemplateSettings:
    """What the caller tells a template when it starts (see :class:`fray.pool.PoolConfig`)."""

    never_in_template: tuple[str, ...]
    """Packages never imported into the template."""
    learn_imports: bool
    """Calls report the modules they imported, for the template to import too."""
    main_in_calls: bool = False
    """Each call imports the caller's ``__main__`` itself: importing it made a template unsafe to fork."""


@dataclass(frozen=True)
class WarmSettings:
    """What the caller tells a warm process when it starts (see :class:`fray.warm_process.WarmConfig`)."""

    idle_s: float
    """It exits after this many seconds without a call."""
    preload: tuple[str, ...] = ()
    """Modules it imports when it starts (so that it can tell what a call changed of them)."""


# --------------------------------------------------------------------------- caller -> template


@dataclass(frozen=True)
class Prepare:
    """The first message: how to become like the caller (as multiprocessing's spawn does)."""

    preparation: dict[str, Any]
    """``multiprocessing.spawn.get_preparation_data``: ``sys.path``, folder, ``__main__``."""
    settings: TemplateSettings | WarmSettings


@dataclass(frozen=True)
class Run:
    """Fork a child to run one call."""

    call_id: int
    modules: list[str]
    """Modules to import into the template first (the call's own, less those refused)."""
    payload: bytes
    """The cloudpickled ``(fn, args, kwargs)``."""
    env: dict[str, str]
    log_path: str
    result_path: str


@dataclass(frozen=True)
class Learn:
    """Modules the calls imported, for the template to import too (through a probe, see :class:`fray.template_imports.Learner`)."""

    entries: list[ModuleEntry]
    refused: list[str]
    """Modules the pool knows not to import into a template."""


@dataclass(frozen=True)
class Retire:
    """Start no more calls; exit when those running have ended."""


ToTemplate = Run | Learn | Retire


# --------------------------------------------------------------------------- template -> caller


@dataclass(frozen=True)
class UnsafeMain:
    """Importing the caller's main script made the template unsafe to fork; it exits."""

    hazard: str


@dataclass(frozen=True)
class Learned:
    """What a ``Learn`` (or a probe it started) came to."""

    imported: list[str]
    excluded: list[str]
    """Modules never to import into a template again."""
    unsafe: bool
    """The template became unsafe to fork (it retires)."""
    more: bool
    """Another probe is under way: more ``Learned`` will follow."""


@dataclass(frozen=True)
class Refused:
    """The template may not fork any more (``module`` made it unsafe): the call is handed back."""

    call_id: int
    module: str


@dataclass(frozen=True)
class Started:
    """A call's child was forked."""

    call_id: int
    pid: int
    failed: list[str]
    """Modules that failed to import into the template (the caller stops asking for them)."""


@dataclass(frozen=True)
class Exited:
    """A call's child exited (its outcome is in its result file)."""

    call_id: int
    code: int


@dataclass(frozen=True)
class Settled:
    """A warm process after a call: back as it was before it (``unclean`` None), or what the call
    left that it could not put back (a line; the process then exits)."""

    call_id: int
    unclean: str | None


ToCaller = UnsafeMain | Learned | Refused | Started | Exited | Settled
