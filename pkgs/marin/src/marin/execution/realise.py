"""Early cutoff: a step whose inputs changed only in name is satisfied by an earlier build.

A step's hash names its inputs by *their* hashes, so rebuilding an upstream step (a version bump
after a refactor) changes every hash downstream even when the upstream output came out
byte-identical. The **realisation key** names the inputs by their *output digests* instead
(:func:`marin.execution.store.output_digest`): the same step (name, function, version, config)
over the same input content has the same key, whatever the inputs' hashes.

Every finished build records its key, its inputs (name, hash, digest) and its own output digest
in its success record (a realisation record, as Nix's content-addressed derivations keep). A
step about to run whose key matches a finished build of the same name, here or in a cache, is
satisfied by a copy of that build verified against its manifest: nothing downstream of an
identical output is rebuilt. Two builds with one key and different digests are the same inputs
giving different outputs: that is reported as nondeterminism, naming the files that differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.hashing import dependencies_of, step_key
from marin.execution.step import Step
from marin.execution.store import ALWAYS_VOLATILE, StepRecord, differing_files, finished_builds, output_digest

if TYPE_CHECKING:
    from marin.execution.plan import Plan, PlannedStep

__all__ = [
    "CARRIED",
    "REALISATION_SCHEMA",
    "Nondeterminism",
    "Realised",
    "digest_of_build",
    "find_nondeterminism",
    "find_realisation",
    "carried_fields",
    "copy_realisation",
    "nondeterminism_of",
    "plan_reuse",
    "realisable",
    "realisation_fields",
    "realisation_key",
    "snapshot_build",
    "volatile_patterns",
]

REALISATION_SCHEMA = "marin.realisation/v1"
VOLATILE_ATTRIBUTE = "VOLATILE_FILES"
"""The config class attribute naming the step's output files that differ between identical builds."""


def volatile_patterns(config: Any) -> tuple[str, ...]:
    """Glob patterns of output files left out of the step's output digest (its config's
    ``VOLATILE_FILES`` after :data:`~marin.execution.store.ALWAYS_VOLATILE`)."""
    extra = getattr(type(config), VOLATILE_ATTRIBUTE, ())
    if isinstance(extra, str) or not all(isinstance(p, str) for p in extra):
        raise TypeError(f"{type(config).__qualname__}.{VOLATILE_ATTRIBUTE} must be a tuple of glob patterns, "
                        f"got {extra!r}")
    return ALWAYS_VOLATILE + tuple(extra)


def realisation_key(step: Step, input_digests: Mapping[int, str], salt: str | None = None) -> str:
    """The step's key with every input named by its output digest (``{id(input step): digest}``)."""
    text = REALISATION_SCHEMA + step_key(step, input_digests, salt)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_of_build(output_path: str, config: Any) -> str | None:
    """The output digest of a finished build: from its success record, else from its manifest
    (builds made before digests were recorded); None when it is not finished."""
    record = StepRecord(output_path)
    success = record.read_json(record.success)
    if success is None:
        return None
    if isinstance(success.get("output_digest"), str):
        return success["output_digest"]
    manifest = record.read_json(record.manifest)
    if manifest is None or not isinstance(manifest.get("files"), list):
        return None
    return output_digest(manifest, volatile_patterns(config))


def inputs_of(step: Step, outputs: Mapping[int, tuple[str, str, str | None]]) -> tuple[dict[int, str], list[dict[str, Any]]] | None:
    """The realisation inputs of ``step``: ``({id(dep): digest}, [{"name", "hash", "digest"}])``.

    Args:
        outputs: ``{id(dep step): (name, hash, digest or None)}`` for each input.

    Returns None when an input's digest is not known (it is not built yet).
    """
    digests: dict[int, str] = {}
    described = []
    for dep in dependencies_of(step):
        name, dep_hash, digest = outputs[id(dep)]
        if digest is None:
            return None
        digests[id(dep)] = digest
        described.append({"name": name, "hash": dep_hash, "digest": digest})
    return digests, described


@dataclass(frozen=True)
class Realised:
    """A finished build of the same step over the same input content."""

    output_path: str
    hash: str
    output_digest: str
    inputs: list[dict[str, Any]]
    """Its inputs as recorded: ``{"name", "hash", "digest"}``."""

    def reason(self, inputs: Sequence[dict[str, Any]]) -> str:
        """Why it stands for the new build: which inputs were rebuilt with identical output."""
        before = {i.get("name"): i.get("hash") for i in self.inputs}
        rebuilt = [i for i in inputs if before.get(i["name"]) != i["hash"]]
        if not rebuilt:
            return f"same inputs as {self.output_path}"
        named = ", ".join(f"{i['name']} (digest {i['digest'][:12]}…)" for i in rebuilt)
        verb = "was" if len(rebuilt) == 1 else "were"
        return f"{named} {verb} rebuilt with identical output; reusing {self.output_path}, not rebuilding"


def find_realisation(name: str, key: str, places: Sequence[str], *, exclude: str = "") -> Realised | None:
    """A finished build of ``name`` with realisation ``key`` under one of ``places`` (the prefix,
    then caches), other than ``exclude``; None if there is none."""
    for place in places:
        for path, success in finished_builds(place, name, exclude=exclude):
            if success.get("realisation_key") != key:
                continue
            digest = success.get("output_digest")
            inputs = success.get("inputs")
            if isinstance(digest, str) and isinstance(inputs, list):
                return Realised(path, str(success.get("hash", "")), digest, [i for i in inputs if isinstance(i, dict)])
    return None


@dataclass(frozen=True)
class Nondeterminism:
    """Two builds from the same inputs with different outputs."""

    other: str
    """The output path of the earlier build."""
    files: list[str]
    """The files that differ (or that only one build has)."""

    def __str__(self) -> str:
        shown = ", ".join(self.files[:5]) + (f" and {len(self.files) - 5} more" if len(self.files) > 5 else "")
        return f"nondeterministic: built from the same inputs as {self.other}, but {shown} differ(s)"

    def to_json(self) -> dict[str, Any]:
        return {"other": self.other, "files": list(self.files)}


def compare_builds(other_path: str, other_manifest: Mapping[str, Any] | None, manifest: Mapping[str, Any],
                   config: Any) -> Nondeterminism | None:
    """The files in which ``manifest`` differs from another build of the same inputs (None: none)."""
    if other_manifest is None or not isinstance(other_manifest.get("files"), list):
        return None
    files = differing_files(dict(other_manifest), dict(manifest), volatile_patterns(config))
    return Nondeterminism(other_path, files) if files else None


def find_nondeterminism(name: str, key: str, digest: str, manifest: Mapping[str, Any], config: Any,
                        places: Sequence[str], *, exclude: str = "") -> Nondeterminism | None:
    """Another finished build of ``name`` with the same realisation key and a different output."""
    for place in places:
        for path, success in finished_builds(place, name, exclude=exclude):
            if success.get("realisation_key") != key or success.get("output_digest") == digest:
                continue
            record = StepRecord(path)
            found = compare_builds(path, record.read_json(record.manifest), manifest, config)
            if found is not None:
                return found
    return None


# -- the plan and the runner ------------------------------------------------------------------

def _inputs_in_plan(plan: Plan, planned: PlannedStep, digest_at: Callable[[int], str | None]) -> tuple[dict[int, str], list[dict[str, Any]]] | None:
    outputs = {}
    for dep in dependencies_of(planned.step):
        q = plan.steps[plan.pos_of[id(dep)]]
        outputs[id(dep)] = (q.name, q.hash, digest_at(plan.pos_of[id(dep)]))
    return inputs_of(planned.step, outputs)


def _finished_digest(plan: Plan, pos: int) -> str | None:
    if pos in plan.published:
        return plan.published[pos]
    q = plan.steps[pos]
    return digest_of_build(q.output_path, q.step.config)


def plan_reuse(plan: Plan, places: Sequence[str]) -> None:
    """Turn the plan's steps that would run into reuses where an earlier build of the same step over
    the same input content exists (here or in a cache): action ``REUSE``, and a reason naming the
    inputs that were rebuilt with identical output. Forced steps always run."""
    from marin.execution.plan import Action, Reason, ReasonKind

    known: dict[int, str | None] = {}

    def digest_at(pos: int) -> str | None:
        if pos not in known:
            q = plan.steps[pos]
            known[pos] = _finished_digest(plan, pos) if q.action is Action.CACHED else None
        return known[pos]

    for pos, p in enumerate(plan.steps):
        if p.action is not Action.RUN or not p.deps or any(r.kind is ReasonKind.FORCED for r in p.reasons):
            continue
        inputs = _inputs_in_plan(plan, p, digest_at)
        if inputs is None:
            continue
        found = find_realisation(p.name, realisation_key(p.step, inputs[0], plan.salt), places, exclude=p.output_path)
        if found is None:
            continue
        p.action = Action.REUSE
        p.realised = found
        p.reasons = [Reason(ReasonKind.REUSE, found.reason(inputs[1]))]
        known[pos] = found.output_digest


def realisation_fields(plan: Plan, planned: PlannedStep, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished build's success record says of its content: its output digest, its
    realisation key and inputs (absent when an input's digest is not known)."""
    digest = output_digest(dict(manifest), volatile_patterns(planned.step.config))
    fields: dict[str, Any] = {"output_digest": digest}
    inputs = _inputs_in_plan(plan, planned, lambda pos: _finished_digest(plan, pos))
    if inputs is not None:
        fields["realisation_key"] = realisation_key(planned.step, inputs[0], plan.salt)
        fields["inputs"] = inputs[1]
    return fields


def realisable(plan: Plan, planned: PlannedStep, places: Sequence[str]) -> Realised | None:
    """For a step about to run whose inputs are now all built: an earlier build of the same step
    over the same input content, found by its realisation key; None to run it."""
    inputs = _inputs_in_plan(plan, planned, lambda pos: _finished_digest(plan, pos))
    if not planned.deps or inputs is None:
        return None
    found = find_realisation(planned.name, realisation_key(planned.step, inputs[0], plan.salt), places,
                             exclude=planned.output_path)
    if found is not None:
        from marin.execution.plan import Reason, ReasonKind

        planned.reasons = [Reason(ReasonKind.REUSE, found.reason(inputs[1]))]
        planned.realised = found
    return found


def copy_realisation(plan: Plan, planned: PlannedStep) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy ``planned.realised`` into the step's own folder, verified against its manifest, and
    record where it came from; returns (manifest, success-record fields) for the caller to publish.

    Raises:
        marin.execution.cache.CacheMiss: the earlier build cannot be used (the folder is cleaned).
    """
    import time

    from marin.execution.cache import CacheHit, CacheMiss, substitute
    from marin.execution.store import clear_output

    found = planned.realised
    if found is None:
        raise ValueError(f"{planned.name}: planned as a reuse of an earlier build, but none was found")
    record = StepRecord(planned.output_path)
    started = time.time()
    # A finished output is never written in place, so on one local file system links stand in for copies.
    substitute(CacheHit(cache=found.output_path, path=found.output_path), planned.output_path, link=True)
    manifest = record.read_json(record.manifest) or {"files": []}
    fields = {**realisation_fields(plan, planned, manifest), "realised_from": found.output_path}
    if fields["output_digest"] != found.output_digest:
        clear_output(planned.output_path)
        raise CacheMiss(f"{found.output_path} no longer has the output digest it recorded")
    provenance = record.read_json(record.provenance) or {}
    provenance.update({
        "hash": planned.hash,
        "dependencies": [{"name": plan.steps[d].name, "hash": plan.steps[d].hash,
                          "path": plan.steps[d].output_path} for d in planned.deps],
        "reasons": [r.to_json() for r in planned.reasons],
        "realised_from": {"path": found.output_path, "hash": found.hash, "output_digest": found.output_digest,
                          "copied_in_s": time.time() - started},
    })
    record.write_json(record.provenance, provenance)
    return manifest, fields


CARRIED = ("output_digest", "realisation_key", "inputs")
"""The fields of a success record that describe the content, and travel with a copy of the output."""


def carried_fields(success: Mapping[str, Any]) -> dict[str, Any]:
    """What a copy of a build (fetched from a cache) keeps of the original's success record."""
    return {k: success[k] for k in CARRIED if k in success}


def snapshot_build(record: StepRecord) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The success record and manifest of a finished build about to be replaced (a forced rebuild)."""
    success = record.read_json(record.success)
    manifest = record.read_json(record.manifest)
    return (success, manifest) if success is not None and manifest is not None else None


def nondeterminism_of(planned: PlannedStep, manifest: Mapping[str, Any], fields: Mapping[str, Any], places: Sequence[str],
                      previous: tuple[dict[str, Any], dict[str, Any]] | None = None) -> Nondeterminism | None:
    """Whether a build that just finished came out different from another build of the same inputs:
    the one it replaced (``previous``: that build's success record and manifest, for a forced
    rebuild), or one with the same realisation key here or in a cache."""
    key = fields.get("realisation_key")
    if key is None:
        return None
    if previous is not None:
        success, old_manifest = previous
        if success.get("realisation_key") == key and success.get("output_digest") != fields["output_digest"]:
            found = compare_builds(f"the build it replaced ({planned.output_name})", old_manifest, manifest,
                                   planned.step.config)
            if found is not None:
                return found
    return find_nondeterminism(planned.name, key, fields["output_digest"], manifest, planned.step.config, places,
                               exclude=planned.output_path)
