"""Hashes of steps over sources that do not exist: for tests of what a config's fields do to a
step's identity, with every source taken to hold one fixed content."""

from __future__ import annotations

from typing import Any

from marin.execution.core.graph import collect_graph
from marin.execution.core.hashing import hash_graph, sources_of_graph
from marin.execution.core.lazy import lower

__all__ = ["FIXED_FINGERPRINT", "hash_over_fixed_sources"]

FIXED_FINGERPRINT = "0" * 64
"""What every source is taken to hold."""


def hash_over_fixed_sources(target: Any) -> str:
    """The hash of ``target`` (a step or handle), every source it reads fingerprinted as
    :data:`FIXED_FINGERPRINT` (nothing is read)."""
    step = lower(target)
    graph = collect_graph([step])
    fixed = {s.key: FIXED_FINGERPRINT for s in sources_of_graph(graph)}
    return hash_graph([step], graph=graph, fingerprints=fixed)[id(step)]
