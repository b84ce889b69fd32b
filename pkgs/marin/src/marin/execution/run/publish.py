"""Publishing a step: the success record, the done marker and the digest its dependents read,
from a build, a cache entry or an earlier build of the same inputs."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marin.execution.core.hashing import realisation_key
from marin.execution.core.step import output_name_of
from marin.execution.core.traits import volatile_patterns
from marin.execution.plan.model import PlannedStep, ReasonKind
from marin.execution.plan.reuse import inputs_in_plan
from marin.execution.run.state import RunState
from marin.execution.store import done_index
from marin.execution.store.cache import CacheHit, CacheMiss, substitute
from marin.execution.store.manifest import clear_output, output_digest
from marin.execution.store.provenance_record import Dependency, Provenance, RealisedFrom
from marin.execution.store.realisations import (
    Nondeterminism,
    Realised,
    compare_builds,
    find_nondeterminism,
    find_realisation,
)
from marin.execution.store.signing import PublicKey
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost

__all__ = ["copy_realisation", "fetch_from_cache", "nondeterminism_of", "publish_copy", "realisable",
           "realisation_fields", "record_listed"]

logger = logging.getLogger("marin.execution.step_runner")


def record_listed(record_path: str, lease: Lease) -> bool:
    """True when the record at ``record_path`` (in ``.marin/``) was in the lease's newest listing of it."""
    return record_path.rpartition("/")[2] in lease.listing


def realisation_fields(state: RunState, planned: PlannedStep, manifest: Mapping[str, Any]) -> SuccessRecord:
    """What a finished build's success record says of its content: its output digest, its
    realisation key and inputs (absent when an input's digest is not known)."""
    digest = output_digest(dict(manifest), volatile_patterns(planned.step))
    inputs = inputs_in_plan(state.plan, planned, state.digest_of)
    if inputs is None:
        return SuccessRecord(output_digest=digest)
    key = realisation_key(planned.step, inputs[0], state.plan.salt, planned.source_digests())
    return SuccessRecord(output_digest=digest, realisation_key=key, inputs=inputs[1])


def realisable(state: RunState, pos: int, places: Sequence[str]) -> Realised | None:
    """For a step about to run whose inputs are now all built: an earlier build of the same step
    over the same input content (found by its realisation key, recorded in the run's state as a
    reuse); None to run it."""
    planned = state.entry(pos)
    inputs = inputs_in_plan(state.plan, planned, state.digest_of)
    if not planned.deps or inputs is None:
        return None
    key = realisation_key(planned.step, inputs[0], state.plan.salt, planned.source_digests())
    found = find_realisation(planned.name, key, places, exclude=planned.output_name)
    if found is not None:
        state.reuse_found(pos, found, found.reason(inputs[1]))
    return found


def publish_copy(state: RunState, pos: int, lease: Lease,
                 copy: Callable[[], tuple[dict[str, Any], SuccessRecord]], instead: str) -> bool:
    """Publish step ``pos`` from a copy of a finished build (a cache entry, an earlier build of the
    same inputs): ``copy()`` fills its folder and returns (manifest, what its success record says of
    its content); then,
    under the lease, the success record, the done marker and the digest dependents read. False
    (with a warning ending in ``instead``) if the copy was refused or the lease lost.
    """
    p = state.entry(pos)
    record = StepRecord(p.output_path)
    try:
        manifest, fields = copy()
        lease.check()
        with lease.fenced():
            published = record.publish(p.name, p.hash, manifest, fields, ttl_s=p.step.ttl_s)
        if not published:
            raise LeaseLost(f"{record.success} was written by another runner")
        provenance = record.read_provenance()
        done_index.mark(state.plan.store.prefix, p.output_name, done_index.env_of(provenance),
                        provenance.code_digest() if provenance is not None else None)
    except CacheMiss as e:
        logger.warning("%s; %s", e, instead)
        return False
    except LeaseLost as e:
        logger.warning("%s: %s", p.output_name, e)
        return False
    if fields.output_digest is not None:
        state.published(pos, fields.output_digest, p.output_path)
    lease.clear()
    return True


def fetch_from_cache(state: RunState, pos: int, lease: Lease, trusted: Sequence[PublicKey] = ()) -> bool:
    """Copy step ``pos`` from its cache into the run's store and publish it; False (with a
    warning naming the entry, the cache and why) if the entry is bad or, with ``trusted`` keys,
    not signed by one of them (``marin.execution.store.signing``)."""
    p = state.entry(pos)
    hit = p.cache_hit
    if hit is None:
        raise ValueError(f"{p.name}: planned as a fetch but has no cache entry")

    def copy() -> tuple[dict[str, Any], SuccessRecord]:
        manifest, cached = substitute(hit, p.output_path, trusted=trusted, step_hash=p.hash)
        return manifest, cached.carried()

    return publish_copy(state, pos, lease, copy, "rebuilding it here")


def copy_realisation(state: RunState, pos: int, lease: Lease, caches: Sequence[str] = (),
                     trusted: Sequence[PublicKey] = ()) -> tuple[dict[str, Any], SuccessRecord]:
    """Copy the earlier build that stands in for ``pos`` into the step's own folder, verified
    against its manifest (and, found in one of ``caches``, with ``trusted`` keys, signed by one of
    them under its own name and hash), and record where it came from (under ``lease``); returns
    (manifest, success-record fields) for :func:`publish_copy` to publish.

    Raises:
        CacheMiss: the earlier build cannot be used (the folder is cleaned).
    """
    planned = state.entry(pos)
    found = planned.realised
    if found is None:
        raise ValueError(f"{planned.name}: planned as a reuse of an earlier build, but none was found")
    record = StepRecord(planned.output_path)
    started = time.time()
    hit = CacheHit(found.place or found.output_path, found.output_path, output_name_of(planned.name, found.hash))
    # A finished output is never written in place, so on one local file system links stand in for copies.
    manifest, _ = substitute(hit, planned.output_path, link=True, trusted=trusted if found.place in caches else (),
                             step_hash=found.hash)
    # Signatures name the build they were made for; this copy is another step's (new name and hash).
    fs.delete(record.signatures)
    fields = dataclasses.replace(realisation_fields(state, planned, manifest), realised_from=found.output_path)
    if fields.output_digest != found.output_digest:
        clear_output(planned.output_path)
        raise CacheMiss(f"{found.output_path} no longer has the output digest it recorded")
    plan = state.plan
    provenance = dataclasses.replace(
        record.read_provenance() or Provenance(),
        hash=planned.hash,
        dependencies=tuple(Dependency(plan.steps[d].name, plan.steps[d].hash, plan.steps[d].output_path)
                           for d in planned.deps),
        reasons=[r.to_json() for r in planned.reasons],
        realised_from=RealisedFrom(found.output_path, found.hash, found.output_digest, time.time() - started),
    )
    # Replaced only under the lease, and created so that no holder that lost it can replace it again.
    with lease.fenced():
        record.write_once(record.provenance, provenance.to_json(), listed=(), still_ours=lease.check)
    return manifest, fields


def nondeterminism_of(planned: PlannedStep, manifest: Mapping[str, Any], fields: SuccessRecord,
                      places: Sequence[str],
                      previous: tuple[SuccessRecord, dict[str, Any]] | None = None) -> Nondeterminism | None:
    """Whether a build that just finished came out different from another build of the same inputs:
    the one it replaced (``previous``: that build's success record and manifest, for a forced
    rebuild), or one with the same realisation key here or in a cache."""
    key = fields.realisation_key
    if key is None or fields.output_digest is None:
        return None
    if planned.code_changed and any(r.kind is ReasonKind.CODE_CHANGED for r in planned.reasons):
        return None  # rebuilt because its code changed: a different output is what was asked for
    volatile = volatile_patterns(planned.step)
    if previous is not None:
        success, old_manifest = previous
        if success.realisation_key == key and success.output_digest != fields.output_digest:
            found = compare_builds(f"the build it replaced ({planned.output_name})", old_manifest, manifest, volatile)
            if found is not None:
                return found
    return find_nondeterminism(planned.name, key, fields.output_digest, manifest, volatile, places,
                               exclude=planned.output_path)
