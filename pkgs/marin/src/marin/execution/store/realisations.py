"""Finished builds found by what they were built from (early cutoff), and builds that disagree.

A step's hash names its inputs by *their* hashes, so a rebuilt input gives every dependent a
new hash even when the rebuilt output is byte-identical. The **realisation key**
(:func:`marin.execution.core.hashing.realisation_key`) names the inputs by their *output
digests* instead: the same step (name, function, version, config) over the same input content
has the same key, whatever the inputs' hashes.

Every finished build records its key, its inputs (name, hash, digest) and its own output digest
in its success record (a realisation record, as Nix's content-addressed derivations keep). A
step about to run whose key matches a finished build of the same name, here or in a cache, is
satisfied by a copy of that build verified against its manifest: nothing downstream of an
identical output is rebuilt. Two builds with one key and different digests are the same inputs
giving different outputs: that is reported as nondeterminism, naming the files that differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.graph import dependencies_of
from marin.execution.core.step import Step
from marin.execution.core.traits import volatile_patterns
from marin.execution.store.manifest import differing_files, output_digest
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import finished_builds
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs

__all__ = ['Nondeterminism', 'Realised', 'compare_builds', 'digest_of_build', 'find_nondeterminism', 'find_realisation', 'inputs_of', 'snapshot_build']


def digest_of_build(output_path: str, step: Step) -> str | None:
    """The output digest of a finished build: from its success record, else from its manifest
    (builds made before digests were recorded); None when it is not finished."""
    record = StepRecord(output_path)
    success = record.read_success()
    if success is None:
        return None
    if success.output_digest is not None:
        return success.output_digest
    manifest = record.read_json(record.manifest)
    if manifest is None or not isinstance(manifest.get("files"), list):
        return None
    return output_digest(manifest, volatile_patterns(step))


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
    place: str = ""
    """The prefix or cache it was found under."""

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
    then caches), other than the output named ``exclude`` (the step's own, ``<name>-<hash16>``) in
    any of them: a run looks for one when the step's own entry was not fetched (a cache's entry it
    refused must not come back as an earlier build); None if there is none."""
    for place in places:
        for path, success in finished_builds(place, name, exclude=fs.join(place, exclude) if exclude else ""):
            if success.realisation_key != key:
                continue
            if success.output_digest is not None and success.inputs is not None:
                return Realised(path, success.hash or "", success.output_digest,
                                [i for i in success.inputs if isinstance(i, dict)], place)
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
                   volatile: Sequence[str]) -> Nondeterminism | None:
    """The files in which ``manifest`` differs from another build of the same inputs (None: none)."""
    if other_manifest is None or not isinstance(other_manifest.get("files"), list):
        return None
    files = differing_files(dict(other_manifest), dict(manifest), volatile)
    return Nondeterminism(other_path, files) if files else None


def find_nondeterminism(name: str, key: str, digest: str, manifest: Mapping[str, Any], volatile: Sequence[str],
                        places: Sequence[str], *, exclude: str = "") -> Nondeterminism | None:
    """Another finished build of ``name`` with the same realisation key and a different output."""
    for place in places:
        for path, success in finished_builds(place, name, exclude=exclude):
            if success.realisation_key != key or success.output_digest == digest:
                continue
            record = StepRecord(path)
            found = compare_builds(path, record.read_json(record.manifest), manifest, volatile)
            if found is not None:
                return found
    return None


def snapshot_build(record: StepRecord) -> tuple[SuccessRecord, dict[str, Any]] | None:
    """The success record and manifest of a finished build about to be replaced (a forced rebuild)."""
    success = record.read_success()
    manifest = record.read_json(record.manifest)
    return (success, manifest) if success is not None and manifest is not None else None
