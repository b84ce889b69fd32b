"""Which files of a finished output travel when it is copied between prefixes (a cache fetch, a
push): exactly the files its manifest lists, which a signature covers, and its known records.

A cache is written by others. Anything in an entry that no signature covers must never land in
the store: a file its manifest does not list, a name that climbs out of the step's folder (``..``,
an absolute name: an object store's keys are free text), a symbolic link (to a file of the
fetching machine). Each of these refuses the whole entry, with one line naming the file, before
a byte of it is written; every name is checked before it is joined to a destination.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from typing import Any

from marin.execution.store.layout import ATTEMPTS_DIR, LOST_PREFIX, META_DIR, is_reserved
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs
from rigging.progress import PROGRESS_FILE

__all__ = ["SIGNED_RECORDS", "TRAVELLING_RECORDS", "EntryIncomplete", "EntryRefused", "entry_copies", "name_problem"]

TRAVELLING_RECORDS = ("manifest.json", "provenance.json", "signatures.json", "log.txt")
"""The records (in ``.marin/``) that travel with a build; its success record is written last by
whoever copies it, and the rest describe one attempt in one place."""
SIGNED_RECORDS = ("provenance.json", "log.txt")
"""The travelling records a signature covers by their digests (``signing.Fingerprint.records``),
beside the manifest it covers by its own; the signatures record is what is signed."""
_STAYING_RECORDS = ("success.json", "status.json", PROGRESS_FILE.rpartition("/")[2])
_STAYING_PREFIXES = ("lease-", LOST_PREFIX)


class EntryRefused(ValueError):
    """A build whose files may not be copied as they are; the message names the file and why."""


class EntryIncomplete(EntryRefused):
    """A build missing a file its manifest lists, or holding one of another size (the message is
    ``<file>: missing`` or ``<file>: size <found> != <listed>``, as a manifest check says it)."""


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a plain name of a file inside a step's output (relative, normalised,
    no ``..``, not the store's own), or None."""
    if not isinstance(name, str) or not name:
        return "its name is empty"
    if "\x00" in name:
        return "its name holds a NUL character"
    if name.startswith("/"):
        return "its name is absolute"
    parts = name.split("/")
    if ".." in parts:
        return "its name climbs out of the step's folder ('..')"
    if posixpath.normpath(name) != name:
        return "its name is not normalised (an empty or '.' part)"
    if is_reserved(name):
        return f"its name is inside {META_DIR}/ or {ATTEMPTS_DIR}/, which the store keeps for itself"
    return None


def _record_travels(name: str) -> bool | None:
    """True for a record that travels, False for one that stays where it was written, None for a
    name that is no record."""
    if name in TRAVELLING_RECORDS:
        return True
    if name in _STAYING_RECORDS or (name.startswith(_STAYING_PREFIXES) and "/" not in name):
        return False
    return None


def _local_links(root: str) -> list[str]:
    """The symbolic links (to files or folders) anywhere below the local folder ``root``, relative."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            full = os.path.join(folder, name)
            if os.path.islink(full):
                found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(found)


def _listed_files(src: str, data: str, strict: bool) -> tuple[dict[str, int], list[str]]:
    """The build's files in ``src``'s listing (``data``: its attempt folder, "" for the step's
    folder), with their sizes, and the records that travel with it."""
    files: dict[str, int] = {}
    records = []
    for rel, size in fs.walk_files(src):
        top = rel.split("/", 1)[0]
        if top == ATTEMPTS_DIR:
            if data and rel.startswith(data + "/"):
                files[rel[len(data) + 1:]] = size
            continue  # other attempts' folders: what their runners left, never part of a build
        if top == META_DIR:
            travels = _record_travels(rel[len(META_DIR) + 1:])
            if travels:
                records.append(rel)
            elif travels is None and strict:
                raise EntryRefused(f"file {rel!r} is neither in its manifest nor one of its records")
            continue
        if not data:  # a build written apart leaves in the step's folder what an earlier attempt wrote
            files[rel] = size
    return files, records


def entry_copies(src: str, manifest: dict[str, Any], success: SuccessRecord, *,
                 strict: bool = True) -> list[tuple[str, str]]:
    """What to copy of the finished output at ``src`` (with this manifest and success record):
    ``(path relative to src, path relative to the destination)`` for every file its manifest
    lists, then its travelling records (:data:`TRAVELLING_RECORDS`), never its success record.

    Args:
        strict: refuse an output holding anything else (a fetch); else leave it behind (a push
            of a build of one's own, which someone may have added a file to since).

    Raises:
        EntryRefused: a listed name is not a plain name inside the output, or (``strict``) a
            file is a symbolic link or neither listed nor a known record; one line naming the file.
        EntryIncomplete: a listed file is missing or of another size.
    """
    entries = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise EntryRefused("its manifest is malformed (no list of files)")
    names = [e.get("path") for e in entries]
    for name in names:
        why = name_problem(name)
        if why is not None:
            raise EntryRefused(f"file {name!r} of its manifest: {why}")
    if len(set(names)) != len(names):
        raise EntryRefused(f"file {next(n for n in names if names.count(n) > 1)!r} is in its manifest twice")
    if strict and fs.is_local(src):
        links = _local_links(fs.strip_protocol(src))
        if links:
            raise EntryRefused(f"file {links[0]!r} is a symbolic link" + _more(links))
    data = success.attempt_folder
    files, records = _listed_files(src, data, strict)
    unlisted = sorted(set(files) - set(names))
    if unlisted and strict:
        raise EntryRefused(f"file {unlisted[0]!r} is not in its manifest (no signature covers it)" + _more(unlisted))
    for entry in entries:
        size = files.get(entry["path"])
        if size is None:
            raise EntryIncomplete(f"{entry['path']}: missing")
        if size != entry.get("size"):
            raise EntryIncomplete(f"{entry['path']}: size {size} != {entry.get('size')}")
    return [(fs.join(data, n) if data else n, n) for n in names] + [(r, r) for r in records]


def _more(names: Iterable[str]) -> str:
    extra = len(list(names)) - 1
    return f" (and {extra} more)" if extra > 0 else ""
