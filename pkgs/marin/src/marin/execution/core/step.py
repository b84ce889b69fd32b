"""Steps: content-hashed derivations, ``fn(config, output_path)`` run once per distinct hash."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.hashing import hash_graph
from marin.execution.core.placeholders import Placeholder
from marin.execution.core.sites import record_site

# Re-exported: configs mark fields with rigging's ``unhashed_field``; the engine reads ``UNHASHED``.
from rigging.durations import parse_duration
from rigging.fields import UNHASHED, unhashed_field

__all__ = ["DEV_VERSION", "UNHASHED", "Step", "name_group", "output_name_of", "unhashed_field", "validate_step_name"]

DEV_VERSION = "dev"
"""A step with this version rebuilds on every run (Marin's meaning): for iterating on code."""

_NAME_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]*$")


def validate_step_name(name: str) -> str:
    """Return ``name`` if it is a safe relative path of simple parts; raise :class:`InvalidStep`.

    A name becomes a folder under the prefix, so it may never climb out of it: no ``..``, no
    leading ``/``, no empty parts, no backslashes or control characters.
    """
    if not isinstance(name, str) or not name:
        raise InvalidStep(f"step name must be a non-empty string, got {name!r}")
    if name.startswith("/"):
        raise InvalidStep(f"step name {name!r} must be relative: it may not start with '/'")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidStep(f"step name {name!r} has an empty, '.' or '..' part")
        if not _NAME_PART.match(part):
            raise InvalidStep(
                f"step name {name!r}: part {part!r} may use only letters, digits and _ . + = - "
                "(and may not start with '.' or '-')"
            )
    return name


def name_group(name: str) -> str:
    """The group a step is shown in by ``marin status`` and reports: its name's folder part
    (``"sweep/lr-0.1"`` for ``"sweep/lr-0.1/model"``), ``""`` for a name without one."""
    return name.rpartition("/")[0]



def output_name_of(name: str, digest: str) -> str:
    """``<name>-<first 16 hex digits of digest>``: the output folder of the step ``name`` with hash
    ``digest``, relative to the prefix (``marin.execution.store.store.StepStore`` places it)."""
    return f"{name}-{digest[:16]}"

@dataclass(frozen=True, eq=False)
class Step(Placeholder):
    """One node of an experiment graph: ``fn(config, output_path)`` run once per distinct hash.

    Attributes:
        name: a relative path such as ``tokenized/tinystories``; the output lives at
            ``<prefix>/<name>-<hash>``.
        fn: an importable module-level function ``fn(config, output_path)``.
        config: a frozen dataclass or JSON-like data; may hold placeholders for other steps'
            outputs (:func:`output_path_of`, or a step or lazy handle directly).
        version: bump it to rebuild when ``fn`` changed in a way its config does not show.
        resources: what the step needs to run (an ``iris`` ResourceConfig); never hashed.
        ttl: how long its output is worth keeping (``"7d"``, ``"12h"``, seconds): after that
            ``marin gc`` may remove it even though a root reaches it (it is built, or fetched,
            again when next needed). For intermediates such as shuffle spill. Never hashed;
            recorded with each build. Stored in seconds.
    """

    name: str
    fn: Callable[[Any, str], Any]
    config: Any = None
    version: str = "v1"
    resources: Any = None
    ttl: float | str | None = None

    def __post_init__(self) -> None:
        validate_step_name(self.name)
        if not callable(self.fn):
            raise InvalidStep(f"step {self.name!r}: fn must be callable, got {self.fn!r}")
        qualname = getattr(self.fn, "__qualname__", "")
        if "<lambda>" in qualname or "<locals>" in qualname:
            raise InvalidStep(
                f"step {self.name!r}: fn {qualname!r} must be a module-level function (workers import it by name)"
            )
        if not isinstance(self.version, str) or not self.version:
            raise InvalidStep(f"step {self.name!r}: version must be a non-empty string, got {self.version!r}")
        if self.ttl is not None:
            try:
                object.__setattr__(self, "ttl", parse_duration(self.ttl))
            except ValueError as e:
                raise InvalidStep(f"step {self.name!r}: ttl {e.args[0].removeprefix('duration ')}") from None
        record_site(self)  # for messages naming where it was defined; never hashed

    @property
    def hash(self) -> str:
        """The step's full hex digest (computed once, with its dependencies; each time for a step
        whose hash depends on what a source holds, which may change while the step lives)."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            return hash_graph([self])[id(self)]
        return cached

    @property
    def ttl_s(self) -> float | None:
        """:attr:`ttl` in seconds; None: kept for as long as a root reaches it."""
        return None if self.ttl is None else float(self.ttl)

    @property
    def output_name(self) -> str:
        """``<name>-<first 16 hex digits of the hash>``: the output folder under the prefix."""
        return output_name_of(self.name, self.hash)

    def target(self) -> tuple[Step, str]:
        return self, ""

    def __repr__(self) -> str:
        return f"Step({self.name!r}, fn={getattr(self.fn, '__qualname__', self.fn)!r}, version={self.version!r})"
