"""What a datakit step reads, as its config holds it, and its typed variants.

A source is a step handle (or step, or ``output_path_of(...)``), a Hugging Face dataset id, a path,
folder, URL or glob of JSON-lines documents, or a list of paths. It is checked when the handle is
built (nothing is read then): a path, URL or id becomes a fingerprinted ``source(...)``
(:func:`marin.experiment.data.sources.as_source`: its content is part of the step's identity, and
relative local paths become absolute since workers run elsewhere); anything else is refused naming it. Hugging Face ids resolve from the hub cache when the step runs
(:func:`marin.processing.attributes.list_files`, through :func:`marin.experiment.data.sources.resolve_source`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from marin.execution.core.placeholders import Placeholder
from marin.execution.core.sources import Source
from marin.experiment.data.sources import as_source

__all__ = ["check_options", "document_source", "variant"]

E = TypeVar("E", bound=enum.Enum)


def document_source(value: Any, what: str = "source") -> Any:
    """``value`` as a datakit step's config holds it (see the module docstring).

    Raises:
        ValueError: ``value`` is none of the accepted kinds (the message names it and ``what``).
    """
    if isinstance(value, Placeholder):
        return value
    if isinstance(value, Source):
        return value
    if isinstance(value, str) and value.strip():
        return as_source(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str | Source) and str(v).strip() for v in value):
        return tuple(as_source(v) for v in value)
    raise ValueError(f"{what} must be a step handle, a Hugging Face id, or a path, folder or glob of JSON lines "
                     f"(or a list of paths), got {type(value).__name__}: {value!r}")


def variant(kind: type[E], value: Any, what: str) -> E:
    """``value`` (a member of ``kind`` or its value) as a member of the enum ``kind``.

    Raises:
        ValueError: ``value`` names no member (the message lists those there are).
    """
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{what} must be one of {choices}, got {value!r}") from None


def check_options(options: Mapping[str, Any], allowed: Any, what: str) -> None:
    """Refuse keyword options that ``allowed`` (a dataclass type) has no field for, naming them.

    Raises:
        ValueError: an unknown option.
    """
    names = {f.name for f in fields(allowed)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ValueError(f"{what}: unknown option {unknown[0]!r} (options: {', '.join(sorted(names))})")
