"""The done index: one flat folder of marker files under the prefix, so that whether a
thousand steps are done is answered by one listing, not a thousand lookups.

Layout::

    <prefix>/.marin/done/<output name, "/" spelled "%">@<environment digest, 16 hex>[.<code digest, 16 hex>]   ("done\\n")

for example ``.marin/done/tokenized%tinystories-0123456789abcdef@fedcba9876543210.00112233aabbccdd``.
A step name uses only letters, digits and ``_ . + = - /`` (``marin.execution.step.validate_step_name``),
so ``%`` and ``@`` never occur in one. The environment digest is the one the step was built in
(``provenance.json``'s ``env_digest``), so a plan can say which cached steps were built in another
environment from the listing alone; ``-`` when it is not known. The code digest is that of the code
it ran (``provenance.json``'s ``code``), so a plan finds the built steps whose code changed from the
listing too, and reads the provenance of those only; markers written before it was kept lack it.

The success record in the step's own folder stays the truth (a step is done if and only if its
``.marin/success.json`` exists); the index is a cache of it:

* written right after the success record (:func:`mark`), and removed before an output is
  cleared or collected (:func:`unmark`), so a marker without a success record exists only while
  an output is being deleted;
* a step missing from the index (a store written before the index existed, or a runner killed
  between the two writes) is looked up at its success record by :func:`done_outputs`, in
  parallel (on object stores only when the listing of its parent folder shows its folder);
* a marker whose output folder was deleted by hand is noticed (on object stores by listing each
  parent folder of the outputs once, locally by looking at the success record). Deleting only
  ``success.json`` of an output on an object store is not noticed: use ``--force`` or
  ``marin gc`` to rebuild or remove outputs.

Reading the index never writes it: :func:`done_outputs` reports what it found out of date
(:class:`IndexFixes`) and a run puts it right (:func:`apply_fixes`) before it builds anything, so
``marin plan`` leaves the store as it found it and the next listing has every done step.

Realisation records and output digests (issue 15) belong beside the success record, not here:
a marker carries nothing but its name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from marin.execution.store.layout import INDEX_DIR, index_folder
from marin.execution.store.listings import FolderListings, in_parallel
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.step_record import StepRecord
from rigging import filesystem as fs

__all__ = ["INDEX_DIR", "UNKNOWN_ENV", "DoneLookup", "IndexFixes", "apply_fixes", "done_outputs", "env_of",
           "index_folder", "mark", "marker_name", "marker_paths", "parse_marker", "read_index", "split_stamp", "stamp_of", "unmark"]

UNKNOWN_ENV = "-"
"""The environment part of a marker whose step's environment digest is not known."""

_SLASH = "%"
_SEP = "@"
_CODE = "."


def marker_name(output_name: str, env_digest: str | None, code_digest: str | None = None) -> str:
    """The marker file name of the output ``<name>-<hash16>`` built in ``env_digest`` from the code
    whose digest is ``code_digest`` (``marin.execution.store.code_digest``; 16 hex of each)."""
    if _SLASH in output_name or _SEP in output_name:
        raise ValueError(f"output name {output_name!r} may not contain {_SLASH!r} or {_SEP!r}")
    stamp = env_digest[:16] if env_digest else UNKNOWN_ENV
    if code_digest:
        stamp += _CODE + code_digest[:16]
    return f"{output_name.replace('/', _SLASH)}{_SEP}{stamp}"


def split_stamp(stamp: str) -> tuple[str, str | None]:
    """A marker's build stamp (what :func:`parse_marker` and :func:`done_outputs` give) as
    (environment digest or ``-``, code digest or None when the marker does not say)."""
    env, _, code = stamp.partition(_CODE)
    return env, code or None


def parse_marker(file_name: str) -> tuple[str, str] | None:
    """(output name, build stamp: the environment digest or ``-``, then ``.`` and the code digest
    when known, :func:`split_stamp`) of a marker file name; None for anything else."""
    stem, sep, env = file_name.rpartition(_SEP)
    if not sep or not stem or not env or file_name.startswith("."):
        return None
    return stem.replace(_SLASH, "/"), env


def _entries(prefix: str) -> list[tuple[str, str, str]]:
    """(file name, output name, environment) of every marker: one folder listing."""
    rows = []
    for entry in fs.listdir(index_folder(prefix)):
        parsed = parse_marker(entry)
        if parsed is not None:
            rows.append((entry, *parsed))
    return rows


def read_index(prefix: str) -> dict[str, str]:
    """Every output the index says is done, with its environment digest: one folder listing."""
    return {name: env for _entry, name, env in _entries(prefix)}


def mark(prefix: str, output_name: str, env_digest: str | None, code_digest: str | None = None) -> None:
    """Record in the index that ``output_name`` is done (after its success record is written)."""
    # Not empty: some stores' emulators refuse empty uploads; the name is all that is read.
    # Not durable: after a machine crash a lost marker is rebuilt from the success record.
    fs.atomic_write(fs.join(index_folder(prefix), marker_name(output_name, env_digest, code_digest)), b"done\n",
                    durable=False)


def marker_paths(prefix: str, output_names: Iterable[str]) -> dict[str, list[str]]:
    """The marker files of each of ``output_names`` that has any (one listing): what :func:`unmark`
    deletes, for a caller that decides output by output."""
    wanted = set(output_names)
    found: dict[str, list[str]] = {}
    for entry, name, _env in _entries(prefix):
        if name in wanted:
            found.setdefault(name, []).append(fs.join(index_folder(prefix), entry))
    return found


def unmark(prefix: str, output_names: Iterable[str]) -> None:
    """Remove the markers of ``output_names`` (before their outputs are cleared or deleted)."""
    for paths in marker_paths(prefix, output_names).values():
        for path in paths:
            fs.delete(path)


def _success_path(prefix: str, output_name: str) -> str:
    return StepRecord(fs.join(prefix, output_name)).success


def env_of(provenance: Provenance | None) -> str | None:
    """The build environment's digest a ``provenance.json`` records, or None."""
    return (provenance.env_digest or None) if provenance is not None else None


def stamp_of(provenance: Provenance | None) -> str:
    """The build stamp a marker of this build carries (see :func:`split_stamp`)."""
    env, code = env_of(provenance), provenance.code_digest() if provenance is not None else None
    return (env[:16] if env else UNKNOWN_ENV) + (_CODE + code[:16] if code else "")


def _stamp_of(prefix: str, output_name: str) -> str:
    record = StepRecord(fs.join(prefix, output_name))
    return stamp_of(record.read_provenance())


def _cheap_lookups(prefix: str) -> bool:
    """Local and ``memory://`` stores answer a lookup without a round trip."""
    return fs.is_local(prefix) or fs.protocol_of(prefix) == "memory"


@dataclass
class IndexFixes:
    """What reading the index found out of date, for a run to put right (:func:`apply_fixes`)."""

    unindexed: dict[str, str] = field(default_factory=dict)
    """Outputs done at their success records but not marked: output name → build stamp."""
    stale: set[str] = field(default_factory=set)
    """File names of markers whose output is gone."""

    def __bool__(self) -> bool:
        return bool(self.unindexed or self.stale)

    def add(self, other: IndexFixes) -> None:
        """Take in what ``other`` found too."""
        self.unindexed.update(other.unindexed)
        self.stale |= other.stale


@dataclass(frozen=True)
class DoneLookup:
    """What :func:`done_outputs` found: the done outputs, and what the index lacks or has wrong."""

    done: dict[str, str]
    """Each done output's name → build stamp (:func:`split_stamp`: its environment digest, ``-``
    if unknown, and its code digest when known)."""
    fixes: IndexFixes


def done_outputs(prefix: str, output_names: Iterable[str], listings: FolderListings | None = None) -> DoneLookup:
    """Which of ``output_names`` are done, each with its build stamp (:func:`split_stamp`).

    One listing of the index, and on object stores one listing per parent folder of the outputs
    (in parallel: an output folder deleted by hand must not read as done, and an output with no
    folder is not done without a look at its success record; locally each marked step's success
    record is looked at instead). Steps missing from the index whose folder exists are looked up
    at their success records (in parallel on object stores). Writes nothing: steps done but not
    marked, and markers whose output is gone, are returned as :class:`IndexFixes`.

    Args:
        listings: where the parent folders' listings are kept (a plan reads them again).
    """
    names = list(dict.fromkeys(output_names))
    marker_of = {name: (entry, env) for entry, name, env in _entries(prefix)}
    marked = [n for n in names if n in marker_of]
    missing = [n for n in names if n not in marker_of]
    if _cheap_lookups(prefix):
        present = {n for n in marked if fs.file_exists(_success_path(prefix, n))}
    else:
        listings = listings if listings is not None else FolderListings()
        listings.fetch({fs.join(prefix, n).rpartition("/")[0] for n in names})
        present = {n for n in marked if listings.has(fs.join(prefix, n))}
        missing = [n for n in missing if listings.has(fs.join(prefix, n))]
    fixes = IndexFixes(stale={marker_of[n][0] for n in marked if n not in present})
    done = {n: marker_of[n][1] for n in marked if n in present}

    def check(name: str) -> tuple[str, str, bool]:
        if not fs.file_exists(_success_path(prefix, name)):
            return name, UNKNOWN_ENV, False
        return name, _stamp_of(prefix, name), True

    results = [check(n) for n in missing] if _cheap_lookups(prefix) else in_parallel(check, missing)
    for name, stamp, is_done in results:
        if is_done:
            done[name] = stamp
            fixes.unindexed[name] = stamp
    return DoneLookup(done, fixes)


def apply_fixes(prefix: str, fixes: IndexFixes) -> None:
    """Put the index right: remove markers whose output is gone, mark outputs found done without one.

    Called by a run, never by a plan. A read-only store (a shared cache) keeps its index as it is:
    planning falls back to the success records, so nothing is wrong, only slower.
    """
    folder = index_folder(prefix)
    with contextlib.suppress(OSError):
        for entry in fixes.stale:
            fs.delete(fs.join(folder, entry))
        for name, stamp in fixes.unindexed.items():
            mark(prefix, name, *split_stamp(stamp))
