"""One graph, one name per step: steps that share a name but not an identity.

Two steps of one name with different identities would both build, side by side under the name,
and every later question by name (``marin show NAME``, the plan's "config changed" against the
newest build of the name, estimates) would mean whichever finished last. The plan finds them
(:func:`name_clashes`) and says where each was defined and what differs; a run refuses them
before anything runs, except where every step of the name is one Marin's executor allows to
share it (:attr:`~marin.execution.core.traits.StepTraits.shares_names`): then it warns. The same
step reached twice (one handle used by two steps) is one entry of the plan, and no clash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.encoding import flatten_config
from marin.execution.core.errors import InvalidStep
from marin.execution.core.identity import fn_identity
from marin.execution.core.sites import Site, site_of
from marin.execution.core.step import Step
from marin.execution.core.traits import traits_of
from marin.execution.plan.config_diff import differing_fields, field_value
from marin.execution.plan.explain import display_path

__all__ = ["Definition", "NameClash", "NameClashes", "name_clashes", "refuse_name_clashes"]

_SHOWN_CHANGES = 4


class NameClashes(InvalidStep):
    """A graph holds two steps of one name with different identities (a run refuses it)."""


@dataclass(frozen=True)
class Definition:
    """One of the steps sharing a name: where it was defined and its hash."""

    site: Site | None
    hash: str

    def __str__(self) -> str:
        where = f"{display_path(self.site[0])}:{self.site[1]}" if self.site is not None else "(defined where unknown)"
        return f"{where} (hash {self.hash[:8]})"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.site[0] if self.site else None, "line": self.site[1] if self.site else None,
                "hash": self.hash}


@dataclass(frozen=True)
class NameClash:
    """Steps of one name with different identities, in the order the graph reached them.

    Attributes:
        name: the name they share.
        definitions: each one's definition site and hash, the first reached first.
        differences: for each definition after the first, what differs from the first
            (``key: before → after``: version, function, config fields).
        allowed: every one of them may share its name (Marin's executor): a warning, not an error.
    """

    name: str
    definitions: tuple[Definition, ...]
    differences: tuple[tuple[str, ...], ...]
    allowed: bool = False

    def __str__(self) -> str:
        first, *others = self.definitions
        if len(others) == 1:
            return (f"two steps named {self.name} with different identities: {first} and {others[0]}: "
                    f"{_joined(self.differences[0])}")
        parts = [f"{d}: {_joined(diff)}" for d, diff in zip(others, self.differences, strict=True)]
        return (f"{len(self.definitions)} steps named {self.name} with different identities: {first}; "
                + "; ".join(parts))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "allowed": self.allowed, "definitions": [d.to_json() for d in self.definitions],
                "differences": [list(d) for d in self.differences]}


def _joined(changes: Sequence[str]) -> str:
    shown = ", ".join(changes[:_SHOWN_CHANGES])
    return shown + (f" and {len(changes) - _SHOWN_CHANGES} more" if len(changes) > _SHOWN_CHANGES else "")


def name_clashes(entries: Sequence[Step], hashes: Mapping[int, str]) -> tuple[NameClash, ...]:
    """The names that more than one of ``entries`` (one step per distinct hash, as the plan has
    them) carry; ``hashes``: ``{id(step): hash}`` of the graph."""
    if len({s.name for s in entries}) == len(entries):
        return ()  # the common case, one set of names: nothing else is looked at
    by_name: dict[str, list[Step]] = {}
    for step in entries:
        by_name.setdefault(step.name, []).append(step)
    names = {hashes[id(s)]: s.name for s in entries}
    clashes = []
    for name, steps in by_name.items():
        if len(steps) < 2:
            continue
        first = steps[0]
        clashes.append(NameClash(
            name=name,
            definitions=tuple(Definition(site_of(s), hashes[id(s)]) for s in steps),
            differences=tuple(_differences(first, s, hashes, names) for s in steps[1:]),
            allowed=all(traits_of(s.fn).shares_names for s in steps)))
    return tuple(clashes)


def _differences(a: Step, b: Step, hashes: Mapping[int, str], names: Mapping[str, str]) -> tuple[str, ...]:
    """What tells ``b`` from ``a``: version, function and config fields, as ``key: before → after``."""
    out = []
    if a.version != b.version:
        out.append(f"version: {a.version} → {b.version}")
    if fn_identity(a.fn) != fn_identity(b.fn):
        out.append(f"fn: {fn_identity(a.fn)} → {fn_identity(b.fn)}")
    # The fields `marin compare` would show as columns for the two.
    before, after = flatten_config(a.config, hashes), flatten_config(b.config, hashes)
    out += [f"{key}: {field_value(key, before, names)} → {field_value(key, after, names)}"
            for key in differing_fields([before, after])]
    # Equal field by field, yet hashed apart: the fields are held by objects of other types.
    return tuple(out) or ("the same field values in config objects of other types",)


def refuse_name_clashes(clashes: Sequence[NameClash]) -> list[NameClash]:
    """Raise :class:`NameClashes` naming the first clash that is not allowed; return the allowed ones
    (to warn about)."""
    refused = [c for c in clashes if not c.allowed]
    if refused:
        more = f" (and {len(refused) - 1} more names: `marin plan` lists them)" if len(refused) > 1 else ""
        raise NameClashes(f"{refused[0]}{more}")
    return list(clashes)
