"""Object-store sources (``gs://``, ``s3://``, ``memory://`` ...) fingerprinted from one listing, no
downloads: each object by the content checksums the listing gives, so an object written again with
the same bytes (a new generation, as ``gsutil cp`` or ``gsutil rsync`` of an unchanged file makes)
fingerprints the same. Its generation is kept beside it, never in the fingerprint: it says that
the object was written again, not that its content changed.

A source is a single object, a folder (every object below it) or a glob. Each is listed by the
raw name prefix before its first glob character, in one paginated request on GCS (a prefix listing
also finds the object of that very name, so a file and a folder cost the same); a prefix that
another source's prefix starts with is served from that listing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.store.source_glob import Glob, fixed_part, has_glob, split_glob
from rigging import filesystem as fs

__all__ = ["ListedObject", "ObjectListingError", "list_object_sources", "object_fingerprint", "object_generation"]

# File systems that list by a raw name prefix (``find(folder, prefix=...)``): gcsfs and s3fs.
_PREFIX_LISTING = ("gs", "gcs", "s3", "s3a")


class ObjectListingError(OSError):
    """A source's prefix could not be listed; ``spec`` names the source."""

    def __init__(self, spec: str, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}")
        self.spec = spec


def object_fingerprint(info: dict[str, Any]) -> str:
    """One object's fingerprint from its listing entry: its content, never its generation.

    ``crc32c:<base64>`` (every GCS object has one), then ``,md5:<base64>`` where the store gives
    an MD5 (GCS's ``md5Hash``; composite objects have none); else ``etag:<etag>`` (S3). A store
    whose listing gives no checksum (``memory://``) is fingerprinted by ``size:<bytes>:mtime:<time>``,
    its size and modification (or creation) time as the listing spells them.
    """
    checksums = [f"{label}:{info[key]}" for key, label in (("crc32c", "crc32c"), ("md5Hash", "md5")) if info.get(key)]
    if checksums:
        return ",".join(checksums)
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return f"etag:{etag}"
    when = next((info[k] for k in ("mtime", "LastModified", "updated", "created") if info.get(k) is not None), None)
    return f"size:{info.get('size')}:mtime:{when}"


def object_generation(info: dict[str, Any]) -> str | None:
    """The generation (GCS) or version id (S3) of an object's listing entry, where the store versions
    objects: which write of it was listed."""
    found = info.get("generation") or info.get("VersionId")
    return str(found) if found else None


@dataclass(frozen=True)
class ListedObject:
    """One object a source names: its name relative to the source's base, its fingerprint
    (:func:`object_fingerprint`) and its generation (:func:`object_generation`)."""

    name: str
    fingerprint: str
    generation: str | None = None


@dataclass(frozen=True)
class _Query:
    """A source in the file system's own spelling (no protocol): what to list, how to pick from it."""

    spec: str
    protocol: str
    path: str
    prefix: str
    base: str
    glob: Glob | None


def _query(spec: str, fsys: Any) -> _Query:
    path = fsys._strip_protocol(spec).rstrip("/") or fsys._strip_protocol(spec)
    protocol = fs.protocol_of(spec)
    if has_glob(path):
        base, pattern = split_glob(path)
        return _Query(spec, protocol, path, fixed_part(path), base, Glob(pattern))
    return _Query(spec, protocol, path, path, path, None)


def _list(fsys: Any, protocol: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Every object whose name starts with ``prefix`` (in the file system's spelling), in one listing."""
    folder, _, rest = prefix.rpartition("/")
    if not folder:
        folder, rest = (prefix[:1], prefix[1:]) if prefix.startswith("/") else (prefix, "")
    try:
        if protocol in _PREFIX_LISTING:
            found = fsys.find(folder, detail=True, prefix=rest)
        else:
            found = fsys.find(folder, detail=True)
    except FileNotFoundError:
        return {}
    return {name: info for name, info in found.items() if name.startswith(prefix)}


def _visible(name: str) -> bool:
    return not any(part.startswith(".") for part in name.split("/"))


def _pick(query: _Query, listing: dict[str, dict[str, Any]]) -> list[ListedObject]:
    """The query's objects among ``listing``, by name (relative to its base)."""
    files = {name: info for name, info in listing.items()
             if info.get("type") != "directory" and not name.endswith("/")}
    if query.glob is None:
        below = query.path + "/"
        inside = [(name[len(below):], info) for name, info in files.items() if name.startswith(below)]
        chosen = [(rel, info) for rel, info in inside if _visible(rel)] if inside else [
            (posixpath.basename(name), info) for name, info in files.items() if name == query.path]
    else:
        base = query.base.rstrip("/") + "/"
        glob = query.glob
        chosen = [(name[len(base):], info) for name, info in files.items()
                  if name.startswith(base) and _glob_takes(glob, name[len(base):])]
    return sorted((ListedObject(rel, object_fingerprint(info), object_generation(info)) for rel, info in chosen),
                  key=lambda o: o.name)


def _glob_takes(glob: Glob, rel: str) -> bool:
    """Whether the object ``rel`` matches, or lies below a folder that matches (hidden names below it skipped)."""
    if glob.matches(rel):
        return True
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        if glob.matches("/".join(parts[:depth])):
            return _visible("/".join(parts[depth:]))
    return False


def list_object_sources(specs: Sequence[str]) -> dict[str, list[ListedObject]]:
    """Every object each of ``specs`` names (empty: none), sorted by name.

    One listing per prefix; a source whose prefix starts with another's is picked from that one.

    Raises:
        ObjectListingError: a listing failed (the store, its credentials or the network).
    """
    queries = []
    for spec in dict.fromkeys(specs):
        fsys = fs.filesystem(spec)
        queries.append((_query(spec, fsys), fsys))
    listed: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    root: tuple[str, str] | None = None
    for query, fsys in sorted(queries, key=lambda q: (q[0].protocol, q[0].prefix)):
        # Sorted, a prefix that covers this one is the last one listed (all between them share it).
        if root is None or root[0] != query.protocol or not query.prefix.startswith(root[1]):
            root = (query.protocol, query.prefix)
            try:
                listed[root] = _list(fsys, query.protocol, query.prefix)
            except Exception as e:  # noqa: BLE001 - any failure of the store (HTTP, auth, OS) is reported by name
                raise ObjectListingError(query.spec, e) from e
        listed[(query.protocol, query.prefix)] = listed[root]
    return {query.spec: _pick(query, {n: i for n, i in listed[(query.protocol, query.prefix)].items()
                                      if n.startswith(query.prefix)})
            for query, _fsys in queries}
