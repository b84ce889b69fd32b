"""Which config fields differ between steps, and what each holds: the columns of ``marin compare``
and what the plan says tells two steps of one name apart (:mod:`marin.execution.plan.clashes`).

Configs are compared flattened (:func:`~marin.execution.core.encoding.flatten_config`:
``{"dotted.path": canonical text}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from marin.execution.core.encoding import describe_encoded

__all__ = ["differing_fields", "field_value"]


def field_value(key: str, flat: Mapping[str, str], names: Mapping[str, str], limit: int = 60) -> str:
    """Field ``key`` of one flattened config, short and readable (a dependency as its step's name
    when ``names`` maps its hash to one): its value, or, where the config sets the field to an
    object whose parts are flattened (``initialize_from.path``, ...), those parts; ``-`` where it
    has neither."""
    if key in flat:
        return describe_encoded(json.loads(flat[key]), names, limit=limit)
    parts = [(k[len(key) + 1:], v) for k, v in flat.items() if k.startswith(key + ".")]
    if not parts:
        return "-"
    return ", ".join(f"{k}={describe_encoded(json.loads(v), names, limit=limit)}" for k, v in parts)


def differing_fields(flat: Sequence[Mapping[str, str]]) -> list[str]:
    """Keys whose values differ between flattened configs, leaving out those that differ only by
    being absent where a parent field is set to nothing (``initialize_from=None`` beside a branch's
    ``initialize_from.step``), and such parents themselves when their children show the difference."""
    keys = sorted({k for f in flat for k in f})
    differing = [k for k in keys if len({f.get(k) for f in flat}) > 1]

    def parent_of(key: str, row: Mapping[str, str]) -> str | None:
        parts = key.split(".")
        return next((p for p in (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)) if p in row), None)

    kept = []
    for key in differing:
        present = {f[key] for f in flat if key in f}
        explained = all(key in f or parent_of(key, f) is not None for f in flat)
        if len(present) == 1 and explained:
            continue  # the same wherever the parent is set: the parent's column says it
        kept.append(key)
    # A parent set to nothing in some configs and expanded in the others is told by its children.
    return [k for k in kept if not any(c.startswith(k + ".") for c in kept)]
