"""Content hashes of steps.

A step's key covers the key-schema version, its name, ``fn``'s identity, ``version``, every
hashed config field, and each dependency's *hash* (never its path). Prefixes, resources, secret
values, unhashed fields, hosts and absolute workspace paths stay out. The realisation key names
the inputs by the digests of their outputs instead (early cutoff, :mod:`marin.execution.store.realisations`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from marin.execution.core.encoding import config_walk
from marin.execution.core.errors import InvalidStep
from marin.execution.core.graph import collect_graph
from marin.execution.core.identity import fn_identity
from marin.execution.core.sources import Source, SourceKey, fingerprints_of

if TYPE_CHECKING:
    from marin.execution.core.placeholders import Placeholder
    from marin.execution.core.step import Step

__all__ = ['KEY_SCHEMA', 'REALISATION_SCHEMA', 'hash_graph', 'realisation_key', 'sources_of_graph', 'step_key']


KEY_SCHEMA = "marin.step/v1"


def step_key(step: Step, hashes: Mapping[int, str], salt: str | None = None,
             fingerprints: Mapping[SourceKey, str] | None = None) -> str:
    """The canonical JSON text whose SHA-256 is the step's hash.

    A step that reads sources (:mod:`marin.execution.core.sources`) adds their fingerprints
    (``fingerprints``: ``{source.key: digest}``), in the order its config holds them; the key of a
    step that reads none is what it always was.
    """
    walk = config_walk(step)
    tail: list[object] = [sorted(hashes[id(d)] for d in walk.deps)]
    if salt:
        tail.append(["env", salt])
    if walk.sources:
        found = fingerprints if fingerprints is not None else {}
        missing = [str(s) for s in walk.sources if s.key not in found]
        if missing:
            raise InvalidStep(f"step {step.name!r}: source {missing[0]} was not fingerprinted")
        tail.append(["sources", [found[s.key] for s in walk.sources]])
    return walk.dumps([KEY_SCHEMA, step.name, fn_identity(step.fn), step.version], tail, hashes)


def sources_of_graph(graph: Iterable[Step]) -> list[Source]:
    """Every source the steps of ``graph`` read, once each, in graph order."""
    seen: dict[SourceKey, Source] = {}
    for step in graph:
        for s in config_walk(step).sources:
            seen.setdefault(s.key, s)
    return list(seen.values())


def hash_graph(roots: Iterable[Placeholder], salt: str | None = None, *,
               graph: Sequence[Step] | None = None,
               fingerprints: Mapping[SourceKey, str] | None = None) -> dict[int, str]:
    """Hash every step reachable from ``roots``; returns ``{id(step): hex digest}``.

    Without ``salt`` the digests are also memoised on the steps (``step.hash``), except where a
    step's hash depends on a source's content (its own or an input's): that content may change
    while the step object lives, so it is looked at again each time. With a salt (the environment
    fingerprint of ``--strict-env``) digests are returned only. ``graph``: the steps
    :func:`collect_graph` returned for ``roots``, when the caller has them (not walked again).
    ``fingerprints``: the sources' digests, when the caller looked at them (the plan does); else
    the installed fingerprinter is asked (:func:`~marin.execution.core.sources.fingerprints_of`).
    """
    steps = graph if graph is not None else collect_graph(roots)
    if fingerprints is None:
        fingerprints = fingerprints_of(sources_of_graph(s for s in steps if "_hash" not in s.__dict__))
    hashes: dict[int, str] = {}
    reads_source: set[int] = set()
    for step in steps:
        if salt is None and "_hash" in step.__dict__:
            hashes[id(step)] = step.__dict__["_hash"]
            continue
        walk = config_walk(step)
        digest = hashlib.sha256(step_key(step, hashes, salt, fingerprints).encode("utf-8")).hexdigest()
        hashes[id(step)] = digest
        if walk.sources or any(id(d) in reads_source for d in walk.deps):
            reads_source.add(id(step))
        elif salt is None:
            object.__setattr__(step, "_hash", digest)
    return hashes


REALISATION_SCHEMA = "marin.realisation/v1"


def realisation_key(step: Step, input_digests: Mapping[int, str], salt: str | None = None,
                    fingerprints: Mapping[SourceKey, str] | None = None) -> str:
    """The step's key with every input named by its output digest (``{id(input step): digest}``)
    and every source by its fingerprint (``fingerprints``, as for :func:`step_key`)."""
    text = REALISATION_SCHEMA + step_key(step, input_digests, salt, fingerprints)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
