"""What a step reads from outside the store: files, folders, globs, object-store URLs and Hugging
Face dataset ids, marked in a config as :class:`Source` so that their content enters the step's
identity.

A source is a marker, like ``output_path_of``: the config holds it, the hash covers its
fingerprint (the content it names, looked at when the plan is made), and ``fn`` receives the
plain path string. Looking at the content is I/O, which the core never does: it asks the
fingerprinter the store layer registers (:func:`set_fingerprinter`,
:mod:`marin.execution.store.sources`), or takes the fingerprints the plan hands it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from marin.execution.core.errors import InvalidStep

__all__ = ["Fingerprinter", "Source", "SourceKey", "fingerprints_of", "set_fingerprinter", "source"]


@dataclass(frozen=True, slots=True)
class Source:
    """An external input: ``spec`` (a path, folder, glob, URL or ``org/name`` Hub dataset id) at
    ``revision`` (Hub ids only: a branch, tag or commit; None is ``main``)."""

    spec: str
    revision: str | None = None

    @property
    def key(self) -> SourceKey:
        """``(spec, revision)``: how fingerprints are looked up."""
        return (self.spec, self.revision)

    def __str__(self) -> str:
        return self.spec if self.revision is None else f"{self.spec}@{self.revision}"


SourceKey = tuple[str, str | None]
Fingerprinter = Callable[[Sequence[Source]], Mapping[SourceKey, str]]
"""Maps sources to their fingerprint digests (raising a ``ValueError`` naming one it cannot read)."""


def source(spec: str, revision: str | None = None) -> Source:
    """Mark ``spec`` as an external input whose content is part of the step's identity.

    A relative local path (one that exists, or a glob) is made absolute here (workers run
    elsewhere); paths inside the
    workspace are hashed relative to it, so the checkout's folder does not matter. ``fn`` receives
    ``spec`` as a string (the absolute path for a local one).

    Raises:
        InvalidStep: ``spec`` is not a non-empty string, or ``revision`` is given for a path or URL.
    """
    if isinstance(spec, Source):
        return spec if revision is None or revision == spec.revision else Source(spec.spec, revision)
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidStep(f"source(...) needs a path, glob, URL or Hugging Face id, got {spec!r}")
    if "://" not in spec and not os.path.isabs(spec) and (os.path.exists(spec) or any(c in spec for c in "*?[")):
        spec = os.path.abspath(spec)
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise InvalidStep(f"source {spec!r}: revision must be a non-empty string, got {revision!r}")
    return Source(spec, revision)


_fingerprinter: list[Fingerprinter] = []


def set_fingerprinter(fn: Fingerprinter) -> None:
    """Install the function that fingerprints sources (the store layer's, when it is imported)."""
    _fingerprinter[:] = [fn]


def fingerprints_of(sources: Sequence[Source]) -> Mapping[SourceKey, str]:
    """The fingerprint digest of each source, from the installed fingerprinter.

    Raises:
        InvalidStep: no fingerprinter is installed (nothing imported the store layer's).
    """
    if not sources:
        return {}
    if not _fingerprinter:
        raise InvalidStep(f"source {sources[0]} cannot be fingerprinted: import marin.execution.store.sources "
                          "(the plan does) before hashing a step that reads one")
    return _fingerprinter[0](sources)
