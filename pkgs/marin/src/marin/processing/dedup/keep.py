"""Which document of a group of duplicates is kept (its representative): the ``keep`` rule of the
exact-document and near-duplicate configs.

* :attr:`Keep.FIRST` (``"first"``, the default): the first in the corpus's total order (shards in
  listing order, then lines).
* :attr:`Keep.LONGEST` (``"longest"``): the one with the longest ``text``, in characters.
* a tuple of id patterns, shell-style as in :mod:`fnmatch` (``("docs/*", "wiki/*")``): the one whose
  id matches the earliest pattern; ids that match no pattern come after all that match one.
* a function of the document record (its JSON object: ``id``, ``text`` and any other field): the
  one for which it returns the greatest value. It must be a module-level function: a config holds
  it by name (``module:qualname``), as it holds every function, and a worker imports it by that name.

Ties go to the first in the total order, so every rule names one representative whatever the
order the duplicates were found in. Only a rule other than ``"first"`` enters a step's identity
(the configs' ``keep`` is an ``added_field``): dedup steps built before the rule existed keep their hash.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

__all__ = ["Keep", "KeepRule", "check_keep", "choose", "keep_rule", "keep_value"]


class Keep(enum.Enum):
    """A named rule for the representative of a group of duplicates (see the module docstring)."""

    FIRST = "first"
    """The first in the corpus's total order."""
    LONGEST = "longest"
    """The longest text (ties: the first of them)."""


KeepRule = Keep | tuple[str, ...] | Callable[[dict[str, Any]], Any]
"""What a config's ``keep`` holds."""


def keep_rule(value: Any, what: str = "keep") -> KeepRule:
    """``value`` as a config holds it: ``"first"`` or ``"longest"`` (or a :class:`Keep`), a list or
    tuple of id patterns (a tuple), or a module-level function (itself).

    Raises:
        ValueError: anything else, named (``what`` says whose ``keep`` it is).
    """
    if isinstance(value, Keep):
        return value
    if isinstance(value, str):
        try:
            return Keep(value)
        except ValueError:
            raise ValueError(f"{what}={value!r} is neither 'first' nor 'longest'; a priority of id patterns is a "
                             f"list: {what}=[{value!r}]") from None
    if isinstance(value, list | tuple):
        if not value or not all(isinstance(p, str) and p for p in value):
            raise ValueError(f"{what}: a priority of id patterns must be a non-empty list of non-empty strings, "
                             f"got {value!r}")
        return tuple(value)
    if callable(value):
        qualname = getattr(value, "__qualname__", None)
        if not isinstance(qualname, str) or "<" in qualname:
            raise ValueError(f"{what}={value!r}: a function for keep must be defined at the top level of a module "
                             "(a config holds it by name; a lambda or a nested function has none)")
        return value
    raise ValueError(f"{what} must be 'first', 'longest', a list of id patterns or a function of the record, "
                     f"got {type(value).__name__}: {value!r}")


def check_keep(value: Any) -> None:
    """Refuse a config's ``keep`` that :func:`keep_rule` would not have made.

    Raises:
        ValueError: ``value`` is not a :class:`Keep`, a tuple of patterns or a module-level function.
    """
    if isinstance(value, str | list):
        raise ValueError(f"keep={value!r}: a config holds a Keep or a tuple of id patterns (keep_rule makes them)")
    keep_rule(value)


def keep_value(rule: KeepRule, doc: dict[str, Any]) -> Any:
    """How much ``rule`` wants ``doc`` kept (greater: more); None for :attr:`Keep.FIRST` (the
    total order alone decides)."""
    if rule is Keep.FIRST:
        return None
    if rule is Keep.LONGEST:
        return len(doc["text"])
    if isinstance(rule, tuple):
        doc_id = str(doc["id"])
        return -next((rank for rank, pattern in enumerate(rule) if fnmatchcase(doc_id, pattern)), len(rule))
    assert callable(rule)
    return rule(doc)


def choose(members: Sequence[int], values: Sequence[Any] | None) -> int:
    """The representative of ``members`` (document numbers in the total order, ascending): the
    one with the greatest value (``values`` by document number), the first of those tied; the
    first member when there are no values (:attr:`Keep.FIRST`).

    Raises:
        ValueError: two members' values cannot be compared (a ``keep`` function's result).
    """
    best = members[0]
    if values is None:
        return best
    for member in members[1:]:
        try:
            better = values[member] > values[best]
        except TypeError:
            raise ValueError(f"keep: the values of two duplicates cannot be compared: {values[best]!r} and "
                             f"{values[member]!r} (a keep function must return values of one comparable kind)") from None
        if better:
            best = member
    return best
