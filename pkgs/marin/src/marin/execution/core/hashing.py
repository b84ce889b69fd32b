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
from marin.execution.core.graph import collect_graph
from marin.execution.core.identity import fn_identity

if TYPE_CHECKING:
    from marin.execution.core.placeholders import Placeholder
    from marin.execution.core.step import Step

__all__ = ['KEY_SCHEMA', 'REALISATION_SCHEMA', 'hash_graph', 'realisation_key', 'step_key']


KEY_SCHEMA = "marin.step/v1"


def step_key(step: Step, hashes: Mapping[int, str], salt: str | None = None) -> str:
    """The canonical JSON text whose SHA-256 is the step's hash."""
    walk = config_walk(step)
    tail: list[object] = [sorted(hashes[id(d)] for d in walk.deps)]
    if salt:
        tail.append(["env", salt])
    return walk.dumps([KEY_SCHEMA, step.name, fn_identity(step.fn), step.version], tail, hashes)


def hash_graph(roots: Iterable[Placeholder], salt: str | None = None, *,
               graph: Sequence[Step] | None = None) -> dict[int, str]:
    """Hash every step reachable from ``roots``; returns ``{id(step): hex digest}``.

    Without ``salt`` the digests are also memoised on the steps (``step.hash``). With one (the
    environment fingerprint of ``--strict-env``) they are returned only. ``graph``: the steps
    :func:`collect_graph` returned for ``roots``, when the caller has them (not walked again).
    """
    hashes: dict[int, str] = {}
    for step in graph if graph is not None else collect_graph(roots):
        if salt is None and "_hash" in step.__dict__:
            hashes[id(step)] = step.__dict__["_hash"]
            continue
        digest = hashlib.sha256(step_key(step, hashes, salt).encode("utf-8")).hexdigest()
        hashes[id(step)] = digest
        if salt is None:
            object.__setattr__(step, "_hash", digest)
    return hashes


REALISATION_SCHEMA = "marin.realisation/v1"


def realisation_key(step: Step, input_digests: Mapping[int, str], salt: str | None = None) -> str:
    """The step's key with every input named by its output digest (``{id(input step): digest}``)."""
    text = REALISATION_SCHEMA + step_key(step, input_digests, salt)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
