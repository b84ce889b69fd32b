"""The explain phase: why a step that is not built at its hash would run; and the start phase:
where its build starts (decided here, once, and handed to the step by the run)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from marin.execution.core.encoding import describe_encoded, flatten_config, holds_dependency
from marin.execution.core.graph import dependencies_of
from marin.execution.core.identity import fn_identity
from marin.execution.core.step import Step
from marin.execution.core.traits import EarlierBuilds, PlanNote, Start, traits_of
from marin.execution.plan.model import Reason, ReasonKind
from marin.execution.store.status_record import BuildState
from marin.execution.store.step_record import StepRecord

if TYPE_CHECKING:
    from marin.execution.store.sources import SourceFingerprint

__all__ = ["display_path", "earlier_attempt", "plan_start", "source_base", "sources_changed", "start_reason",
           "step_notes", "why_changed"]


def why_changed(step: Step, hashes: Mapping[int, str], earlier_builds: EarlierBuilds,
                runs: set[int], sources: Sequence[SourceFingerprint] = ()) -> list[Reason]:
    """Reasons a step not built at this hash runs, against the newest earlier build of its name.

    Args:
        hashes: ``{id(step): hash}`` of the graph.
        earlier_builds: finished builds of a name, newest first.
        runs: ``id``s of the step objects that run in this plan (their dependents run because of them).
        sources: what the sources it reads hold now (compared with what the earlier build read).
    """
    reasons: list[Reason] = []
    changed_deps = [d for d in dependencies_of(step) if id(d) in runs]
    if changed_deps:
        names = ", ".join(sorted({d.name for d in changed_deps}))
        reasons.append(Reason(ReasonKind.UPSTREAM_CHANGED, names))
    earlier = earlier_builds(step.name)
    if not earlier:
        # Nothing of this name was built before: it is new, whatever its inputs did.
        return [Reason(ReasonKind.NEW, "no earlier build of this name")]
    _, prov = earlier[0]
    old_version = prov.version
    if old_version is not None and old_version != step.version:
        reasons.append(Reason(ReasonKind.VERSION_BUMPED, f"{old_version} → {step.version}"))
    old_fn = prov.fn
    if old_fn is not None and old_fn != fn_identity(step.fn):
        reasons.append(Reason(ReasonKind.FN_CHANGED, f"{old_fn} → {fn_identity(step.fn)}"))
    old_flat = prov.config_flat
    if old_flat is not None:
        # A damaged record of an old build explains less; it must never stop the plan.
        old_flat = {k: v for k, v in old_flat.items() if isinstance(v, str)}
        dependency_keys: set[str] = set()
        new_flat = flatten_config(step.config, hashes, dependency_keys=dependency_keys)
        for key in sorted(set(old_flat) | set(new_flat)):
            before, after = old_flat.get(key), new_flat.get(key)
            if before == after:
                continue
            if key in dependency_keys and before is not None and holds_dependency(before):
                if changed_deps:
                    continue  # already explained by the upstream change
                reasons.append(Reason(ReasonKind.UPSTREAM_CHANGED, f"{key} now points at another build"))
                continue
            reasons.append(Reason(ReasonKind.CONFIG_CHANGED, f"{key}: {_show(before)} → {_show(after)}"))
    reasons.extend(sources_changed(sources, prov.source_fingerprints()))
    if not reasons:
        if prov.env_digest and prov.strict_env:
            reasons.append(Reason(ReasonKind.ENV_CHANGED, "the environment fingerprint differs (--strict-env)"))
        else:
            reasons.append(Reason(ReasonKind.NEW, "no earlier build at this hash"))
    return reasons


def sources_changed(now: Sequence[SourceFingerprint], built: Sequence[SourceFingerprint]) -> list[Reason]:
    """What differs between the sources a step reads now and those an earlier build read (matched
    by spec and revision): files added, changed or removed, or the commit a Hub id resolves to."""
    # Not at import: a plan whose steps read no source (the no-op path of most runs) never needs it.
    from marin.execution.store.sources import diff_files

    before = {(f.spec, f.revision): f for f in built}
    reasons = []
    for f in now:
        old = before.get((f.spec, f.revision))
        if old is None or old.digest == f.digest:
            continue
        if f.kind == "hub" or old.kind == "hub":
            detail = f"commit {(old.commit or '?')[:12]} → {(f.commit or '?')[:12]}"
        else:
            base = source_base(f.spec)
            detail = diff_files(old.file_map(), f.file_map()).describe(prefix=base) or "content differs"
        reasons.append(Reason(ReasonKind.SOURCE_CHANGED, f"{display_path(f.spec)}: {detail}"))
    return reasons


def display_path(spec: str) -> str:
    """A local path as the user sees it: relative to the working folder when under it."""
    if "://" in spec or not os.path.isabs(spec):
        return spec
    rel = os.path.relpath(spec)
    return spec if rel.startswith("..") else rel


def source_base(spec: str) -> str:
    """The folder a local source's file names are relative to, as shown (``""`` for others)."""
    from marin.execution.store.source_glob import has_glob, split_glob  # see sources_changed

    if "://" in spec or not os.path.isabs(spec):
        return ""
    if has_glob(spec):
        return display_path(split_glob(spec)[0])
    return display_path(spec if os.path.isdir(spec) else os.path.dirname(spec))


def _show(encoded: str | None) -> str:
    if encoded is None:
        return "(absent)"
    try:
        value = json.loads(encoded)
    except ValueError:
        return encoded
    return describe_encoded(value)


def plan_start(step: Step, hashes: Mapping[int, str], earlier_builds: EarlierBuilds) -> Start | None:
    """Where a build of ``step`` starts, when its function's traits decide it
    (:attr:`~marin.execution.core.traits.StepTraits.plan_start`): a branch, an extension of an
    earlier build of itself. The run hands exactly this to the step."""
    decide = traits_of(step.fn).plan_start
    if decide is None:
        return None
    start = decide(step, hashes, earlier_builds)
    if start is not None and not isinstance(start, Start):
        raise TypeError(f"{step.name}: plan_start must return a Start or None, got {type(start).__name__}")
    return start


def step_notes(step: Step, paths: Mapping[int, str]) -> tuple[Reason, ...]:
    """The notes and warnings a step's traits give the plan (:attr:`~marin.execution.core.traits.StepTraits.plan_notes`),
    as reasons of the kinds ``note`` and ``warning``."""
    describe = traits_of(step.fn).plan_notes
    if describe is None:
        return ()
    out = []
    for note in describe(step, paths):
        if not isinstance(note, PlanNote):
            raise TypeError(f"{step.name}: plan_notes must return PlanNote values, got {type(note).__name__}")
        out.append(Reason(ReasonKind.WARNING if note.warning else ReasonKind.NOTE, note.text))
    return tuple(out)


def start_reason(start: Start) -> Reason:
    """The line the plan shows for a build's start (not a cause of the build)."""
    return Reason(ReasonKind.STARTS_FROM, start.note)


def earlier_attempt(record: StepRecord) -> Reason | None:
    """Why a step whose folder holds an unfinished attempt runs again (failed, killed, resuming)."""
    status = record.read_status()
    if status.state is BuildState.FAILED:
        error = status.error.splitlines()[0] if status.error else ""
        return Reason(ReasonKind.EARLIER_FAILED, error[:200])
    if status.state is BuildState.RUNNING:
        return Reason(ReasonKind.RESUMING, f"another runner holds it ({status.holder})")
    if status.state is BuildState.KILLED:
        return Reason(ReasonKind.EARLIER_KILLED, f"attempt {status.attempt or '?'} by {status.holder or '?'}")
    return None
