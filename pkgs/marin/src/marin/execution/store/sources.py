"""What enters a step from outside, fingerprinted by content (Nix's fixed-output derivations, DVC's
state cache and Bazel's digests are the models).

* Local files, folders and globs: each file's SHA-256, read once and then remembered by its stat
  (:class:`StatCache`): an unchanged file is never read again, a touched one is read again and
  fingerprints the same.
* Object-store URLs and globs (``gs://`` ...): the content checksums of each object (crc32c, and
  MD5 where the store gives it), from one listing per prefix
  (:mod:`marin.execution.store.object_sources`); nothing is downloaded, and an object written
  again with the same bytes (a new generation) fingerprints the same.
* Hugging Face dataset ids (``org/name``): the commit their revision resolves to, from the Hub,
  or from the hub cache's ``refs/`` offline (``HF_HUB_OFFLINE=1``) or, with a warning, when the Hub
  cannot be reached (:mod:`marin.execution.store.hub_sources`).

A fingerprint's :attr:`~SourceFingerprint.digest` is what enters identities. It holds file names
relative to the source's base folder and their fingerprints, never the spec itself (the step's
config holds that), so the same files fingerprint the same wherever they are.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.sources import Source, SourceKey, set_fingerprinter
from marin.execution.store.hub_sources import HubLookupError, hub_commit
from marin.execution.store.object_sources import ObjectListingError, list_object_sources
from marin.execution.store.source_glob import Glob, has_glob, split_glob
from marin.execution.store.stat_cache import (
    StatCache,
    default_stat_cache,
    listing_signature,
    stat_cache_path,
    trusted,
)
from rigging import filesystem as fs
from rigging.hf_hub import is_hf_id

__all__ = ["FileChanges", "SourceFingerprint", "SourceKind", "SourceUnavailable", "StatCache", "default_stat_cache",
           "diff_files", "fingerprint_digests", "fingerprint_source", "fingerprint_sources", "local_source_files",
           "source_kind", "stat_cache_path"]



class SourceUnavailable(ValueError):
    """A source that cannot be fingerprinted; the message names it and what is wrong (it matches
    nothing, a file cannot be read, a Hub id is not in the hub cache offline)."""


class SourceKind(enum.StrEnum):
    """Where a source lives."""

    LOCAL = "local"
    OBJECT = "object"
    HUB = "hub"


@dataclass(frozen=True)
class SourceFingerprint:
    """What a source held when it was fingerprinted."""

    spec: str
    """The source as given: a local path, folder or glob, a ``gs://...`` URL or glob, or ``org/name``."""
    revision: str | None
    """The revision asked for (Hub ids only; None is ``main``)."""
    kind: str
    """A :class:`SourceKind` value: ``local``, ``object`` or ``hub``."""
    digest: str
    """SHA-256 (hex) of the kind and the files' names and fingerprints (a Hub id and its commit):
    the value that enters identities."""
    files: tuple[tuple[str, str], ...]
    """Sorted ``(name, fingerprint)``: names relative to the source's base folder (a single file's
    is its base name); a local file's SHA-256, an object's listing checksums (never its
    generation). Empty for a Hub id."""
    commit: str | None = None
    """The 40-hex commit a Hub id's revision resolved to."""
    generations: tuple[tuple[str, str], ...] = ()
    """Sorted ``(name, generation)`` of an object-store source's objects where the store versions
    them: which write of each was read. Not in :attr:`digest`: an object written again with the
    same bytes is the same input; it tells only that it was written again."""

    def __post_init__(self) -> None:
        if self.kind not in {k.value for k in SourceKind}:
            raise ValueError(f"kind must be one of {[k.value for k in SourceKind]}, got {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        """The fingerprint as JSON-ready data (read back by :meth:`from_json`)."""
        data: dict[str, Any] = {"spec": self.spec, "revision": self.revision, "kind": str(self.kind),
                                "digest": self.digest, "files": [[name, value] for name, value in self.files],
                                "commit": self.commit}
        if self.generations:
            data["generations"] = [[name, generation] for name, generation in self.generations]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceFingerprint:
        """Read what :meth:`to_json` wrote.

        Raises:
            ValueError: a field is missing or of the wrong type.
        """
        try:
            files = tuple((str(name), str(value)) for name, value in data.get("files") or ())
            generations = tuple((str(name), str(value)) for name, value in data.get("generations") or ())
            return cls(spec=str(data["spec"]), revision=data.get("revision"), kind=str(data["kind"]),
                       digest=str(data["digest"]), files=files, commit=data.get("commit"), generations=generations)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a source fingerprint ({type(e).__name__}: {e}): {dict(data)!r:.200}") from None

    def file_map(self) -> dict[str, str]:
        """``{name: fingerprint}`` of its files."""
        return dict(self.files)


@dataclass(frozen=True)
class FileChanges:
    """How two fingerprints' files differ (names sorted)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def describe(self, limit: int = 3, prefix: str = "") -> str:
        """A line such as ``1 file added (d4.jsonl), 2 changed (d1.jsonl, d2.jsonl)``; ``""`` when
        nothing differs. Each part names at most ``limit`` files, then ``...``; ``prefix``: a
        folder to show before each name (``src`` gives ``src/d4.jsonl``)."""
        parts = []
        for verb, names in (("added", self.added), ("changed", self.changed), ("removed", self.removed)):
            if not names:
                continue
            named = [f"{prefix.rstrip('/')}/{n}" if prefix else n for n in names[:limit]]
            shown = ", ".join(named) + (", ..." if len(names) > limit else "")
            noun = "" if parts else (" file" if len(names) == 1 else " files")
            parts.append(f"{len(names)}{noun} {verb} ({shown})")
        return ", ".join(parts)


def diff_files(old: Mapping[str, str], new: Mapping[str, str]) -> FileChanges:
    """Which names ``new`` adds to ``old``, gives another fingerprint, or lacks."""
    return FileChanges(added=tuple(sorted(new.keys() - old.keys())),
                       changed=tuple(sorted(n for n in old.keys() & new.keys() if old[n] != new[n])),
                       removed=tuple(sorted(old.keys() - new.keys())))


def source_kind(spec: str) -> SourceKind:
    """Where ``spec`` lives: a URL other than ``file://`` is an object store; an existing or absolute
    path, or a glob, is local; else ``org/name`` is a Hugging Face id.

    Raises:
        SourceUnavailable: it is none of these.
    """
    if "://" in spec and not fs.is_local(spec):
        return SourceKind.OBJECT
    path = fs.strip_protocol(spec)
    if "://" in spec or os.path.lexists(path) or os.path.isabs(path) or has_glob(path):
        return SourceKind.LOCAL
    if is_hf_id(spec):
        return SourceKind.HUB
    raise SourceUnavailable(f"source {spec!r} is neither an existing path, a URL, nor a Hugging Face id (org/name)")


def _digest(payload: list[Any]) -> str:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _files_digest(kind: SourceKind, files: Iterable[tuple[str, str]]) -> str:
    return _digest([kind.value, [[name, value] for name, value in files]])


# ---------------------------------------------------------------------------------------------- local


def _walk(top: str, glob: Glob | None) -> list[tuple[str, str]]:
    """``(name, path)`` of the files below the folder ``top``, names relative and ``/``-separated:
    every file but hidden ones, or (``glob``) the files it matches and all files below folders it
    matches. A folder is entered once per (device, inode): a symlinked folder is followed, a loop is not.
    """
    found = []
    root = os.stat(top or ".")
    seen = {(root.st_dev, root.st_ino)}
    stack: list[tuple[str, bool]] = [("", glob is None)]
    while stack:
        rel, everything = stack.pop()
        with os.scandir(os.path.join(top or ".", rel)) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            take = not entry.name.startswith(".") if everything or glob is None else glob.matches(name)
            if entry.is_dir():
                if not take and (everything or glob is None or not glob.may_hold(name)):
                    continue
                info = entry.stat()
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    stack.append((name, take))
            elif take and (entry.is_file() or entry.is_symlink()):
                found.append((name, entry.path))  # a dangling link too: reading it reports it
    return found


def _local_files(path: str) -> list[tuple[str, str]]:
    """``(name, path)`` of the files of a local file, folder or glob, names relative to its base folder."""
    if has_glob(path):
        base, pattern = split_glob(path)
        return _walk(base, Glob(pattern)) if os.path.isdir(base or ".") else []
    if os.path.isdir(path):
        return _walk(path, None)
    if os.path.lexists(path):
        return [(os.path.basename(path), path)]
    return []


def local_source_files(spec: str) -> list[str]:
    """The paths of the files a local source covers (those its fingerprint digests), for a caller
    that watches them by ``stat`` (``marin run``'s no-op record); the folders listed to find them
    are those :func:`os.scandir` is called on here."""
    return [full for _name, full in _local_files(fs.strip_protocol(spec))]


def _unreadable(spec: str, path: str, error: OSError) -> SourceUnavailable:
    return SourceUnavailable(f"source {spec!r}: {error.filename or path} cannot be read "
                             f"({error.strerror or type(error).__name__})")


def _fingerprint_local(spec: str, cache: StatCache) -> SourceFingerprint:
    path = fs.strip_protocol(spec)
    try:
        listed = _local_files(path)
    except OSError as e:
        raise _unreadable(spec, path, e) from None
    now = time.time_ns()
    kept, paths, stats = [], [], []
    for name, full in sorted(dict(listed).items()):
        try:
            info = os.stat(full)
        except OSError as e:
            raise _unreadable(spec, full, e) from None
        if stat.S_ISREG(info.st_mode):  # not a pipe, socket or device
            kept.append(name)
            paths.append(full)
            stats.append(info)
    if not kept:
        raise SourceUnavailable(f"source {spec!r} matches no file")
    signature = listing_signature(paths, stats)
    remembered = cache.listing(spec, signature)
    if remembered is not None and len(remembered[0]) == len(kept):
        return SourceFingerprint(spec, None, SourceKind.LOCAL.value, remembered[1],
                                 tuple(zip(kept, remembered[0], strict=True)))
    try:
        digests = cache.digests_of(paths, stats, now)
    except OSError as e:
        raise _unreadable(spec, path, e) from None
    files = tuple(zip(kept, digests, strict=True))
    digest = _files_digest(SourceKind.LOCAL, files)
    if trusted(stats, now):
        cache.remember_listing(spec, signature, digests, digest)
    return SourceFingerprint(spec, None, SourceKind.LOCAL.value, digest, files)


# ---------------------------------------------------------------------------------------------- hub


def _fingerprint_hub(repo_id: str, revision: str | None) -> SourceFingerprint:
    try:
        commit = hub_commit(repo_id, revision or "main")
    except HubLookupError as e:
        raise SourceUnavailable(str(e)) from None
    digest = _digest([SourceKind.HUB.value, repo_id, commit])
    return SourceFingerprint(repo_id, revision, SourceKind.HUB.value, digest, (), commit)


# ---------------------------------------------------------------------------------------------- entry points


def fingerprint_source(spec: str, revision: str | None = None, *,
                       stat_cache: StatCache | None = None) -> SourceFingerprint:
    """Fingerprint one source (see :func:`fingerprint_sources`)."""
    return fingerprint_sources([(spec, revision)], stat_cache=stat_cache)[(spec, revision)]


def fingerprint_sources(specs: Iterable[tuple[str, str | None]], *,
                        stat_cache: StatCache | None = None) -> dict[tuple[str, str | None], SourceFingerprint]:
    """Fingerprint sources by content, each object-store prefix listed once for them all.

    Args:
        specs: ``(spec, revision)`` pairs; a revision applies to Hugging Face ids only.
        stat_cache: where local files' digests are remembered (default: :func:`default_stat_cache`,
            opened once for the call).

    Returns:
        ``{(spec, revision): fingerprint}`` for each distinct pair.

    Raises:
        SourceUnavailable: a source matches no file, cannot be read or listed, or is a Hub id that
            cannot be resolved; the message names it.
    """
    wanted = list(dict.fromkeys(specs))
    kinds = {key: source_kind(key[0]) for key in wanted}
    for (spec, revision), kind in kinds.items():
        if revision is not None and kind is not SourceKind.HUB:
            raise SourceUnavailable(f"source {spec!r}: a revision ({revision!r}) applies to Hugging Face ids only")
    found = _fingerprint_objects([spec for (spec, _r), kind in kinds.items() if kind is SourceKind.OBJECT])
    local = [spec for (spec, _r), kind in kinds.items() if kind is SourceKind.LOCAL]
    if local:
        cache = stat_cache if stat_cache is not None else default_stat_cache()
        try:
            found.update({(spec, None): _fingerprint_local(spec, cache) for spec in local})
        finally:
            if stat_cache is None:
                cache.close()
    found.update({key: _fingerprint_hub(*key) for key, kind in kinds.items() if kind is SourceKind.HUB})
    return {key: found[key] for key in wanted}


def _fingerprint_objects(specs: list[str]) -> dict[tuple[str, str | None], SourceFingerprint]:
    if not specs:
        return {}
    try:
        listed = list_object_sources(specs)
    except ObjectListingError as e:
        raise SourceUnavailable(f"source {e.spec!r} cannot be listed ({e})") from None
    out = {}
    for spec in specs:
        objects = listed[spec]
        if not objects:
            raise SourceUnavailable(f"source {spec!r} matches no file")
        files = tuple((o.name, o.fingerprint) for o in objects)
        generations = tuple((o.name, o.generation) for o in objects if o.generation is not None)
        out[(spec, None)] = SourceFingerprint(spec, None, SourceKind.OBJECT.value,
                                              _files_digest(SourceKind.OBJECT, files), files, generations=generations)
    return out


def fingerprint_digests(sources: Sequence[Source]) -> dict[SourceKey, str]:
    """``{source.key: fingerprint digest}`` of ``sources``: what hashing asks for
    (:func:`marin.execution.core.sources.fingerprints_of`)."""
    return {key: f.digest for key, f in fingerprint_sources([s.key for s in sources]).items()}


# Hashing (the core, which does no I/O) asks this layer for the content of what a step reads.
set_fingerprinter(fingerprint_digests)
