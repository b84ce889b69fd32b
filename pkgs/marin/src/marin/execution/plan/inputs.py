"""The phase of planning that looks outside the store's records: what the sources a graph reads
hold now (:mod:`marin.execution.store.sources`), and which built steps ran code that has changed
since (:mod:`marin.execution.store.code_digest`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from marin.execution.core.encoding import config_walk
from marin.execution.core.hashing import sources_of_graph
from marin.execution.core.sources import SourceKey
from marin.execution.core.step import Step
from marin.execution.plan.model import SourceNotFound
from marin.execution.store.done_index import split_stamp
from marin.execution.store.listings import in_parallel
from marin.execution.store.step_record import StepRecord

if TYPE_CHECKING:
    from marin.execution.store.code_digest import CodeDigest
    from marin.execution.store.sources import SourceFingerprint

__all__ = ["code_changes_of", "fingerprint_graph"]


def fingerprint_graph(graph: Sequence[Step]) -> dict[SourceKey, SourceFingerprint]:
    """What every source of ``graph`` holds now (one look at each, through the stat cache).

    Raises:
        SourceNotFound: a source matches nothing or cannot be read; the message names the step
            that reads it. Raised here, before any step runs.
    """
    found = sources_of_graph(graph)
    if not found:
        return {}
    # Not at import: most graphs read no source, and a no-op run must not pay for what it never uses.
    from marin.execution.store.sources import SourceUnavailable, fingerprint_sources

    try:
        return fingerprint_sources([s.key for s in found])
    except SourceUnavailable as e:
        # The message names the source as the spec's repr (quoted): a spec that is a prefix of another's
        # is not taken for it.
        readers = [step.name for step in graph for s in config_walk(step).sources if repr(s.spec) in str(e)]
        where = f"step {readers[0]!r}: " if readers else ""
        raise SourceNotFound(f"{where}{e}") from None


def code_changes_of(entries: Sequence[Step], outputs: Sequence[str],
                    stamps: Sequence[str | None]) -> dict[int, tuple[str, ...]]:
    """For each built entry whose code changed since its build: the functions that changed
    (``module:qualname``), by position in ``entries`` (their output folders: ``outputs``). The done
    index's stamps (``stamps``: per entry, None when not built) say which builds ran other code;
    only those builds' provenance is read, to name the functions. A build whose marker has no code
    digest (made before digests were kept) is not judged."""
    # Not at import: only `marin plan` and runs that rebuild changed code look at code.
    from marin.execution.store.code_digest import CodeDigest, code_digest

    digests: dict[int, CodeDigest] = {}
    suspects = []
    for pos, stamp in enumerate(stamps):
        built = split_stamp(stamp)[1] if stamp is not None else None
        if built is None:
            continue
        fn = entries[pos].fn
        if id(fn) not in digests:
            digests[id(fn)] = code_digest(fn)
        if digests[id(fn)].digest[:16] != built:
            suspects.append(pos)

    def check(pos: int) -> tuple[str, ...]:
        prov = StepRecord(outputs[pos]).read_provenance()
        try:
            built = CodeDigest.from_json(prov.code) if prov is not None and prov.code is not None else None
        except (KeyError, TypeError, ValueError):
            built = None
        now = digests[id(entries[pos].fn)]
        return now.changed_since(built) if built is not None else (now.functions[0][0],)

    return {pos: found for pos, found in zip(suspects, in_parallel(check, suspects), strict=True) if found}
