"""What :mod:`rigging.filesystem` does on ``gs://``, each in as few requests as gcsfs allows.

Every function takes a ``gcsfs.core.GCSFileSystem`` and a path without its ``gs://``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from typing import Any

__all__ = ["DIGEST_CHUNK", "create_object", "filesystem", "list_names", "object_exists", "sha256_of"]

DIGEST_CHUNK = 64 << 20
"""Bytes per ranged read when hashing an object of known size (one request each)."""


def filesystem() -> Any:
    """A ``gcsfs.core.GCSFileSystem`` for plain buckets that never answers from a cached listing."""
    # Plain buckets only. gcsfs picks its zonal/HNS subclass (which talks gRPC and hangs against
    # the local emulator) when GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT is unset *at its import*, which
    # may have happened before we run; so name the core class directly, and set the variable for
    # child processes that import gcsfs later.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from gcsfs.core import GCSFileSystem  # deferred: planning cached local steps never needs it

    # Other processes write the same bucket: a cached listing would hide their objects or report
    # stale sizes (and a read sized from a stale listing returns a truncated file).
    return GCSFileSystem(use_listings_cache=False)


def object_exists(fs: Any, p: str) -> bool:
    """True when the object ``p`` exists: one GET of its metadata (``fs.exists`` may add listings
    to look for a folder of that name)."""
    from fsspec.asyn import sync  # deferred: rigging.filesystem imports this module for local work too

    try:
        sync(fs.loop, fs._get_object, p)
    except FileNotFoundError:
        return False
    return True


def create_object(fs: Any, p: str, payload: bytes) -> bool:
    """Create the object ``p`` unless it exists; True when this request created it. One request.

    A multipart upload with the precondition ``ifGenerationMatch=0``: GCS creates the object only
    if no live generation of it exists, atomically, and answers 412 otherwise (gcsfs raises
    ``FileExistsError``), so of any number of concurrent creators exactly one gets True. The
    strict test emulator (fake-gcs-server) enforces it on multipart uploads only, real GCS on
    every upload; ``gcp-storage-emulator`` ignores it.

    A response lost after the object was written makes gcsfs retry, and the retry is refused:
    False, though this call created it. Callers stay safe (a lease nobody renews expires; a
    record someone created is there), never doubly granted.
    """
    try:
        fs.pipe_file(p, payload, mode="create")  # gcsfs's simple_upload: multipart, the precondition set
    except FileExistsError:
        return False
    return True


def list_names(fs: Any, p: str) -> list[str]:
    """The names directly under the folder ``p``, sorted: one listing (a page per 1,000 names).

    gcsfs's ``ls`` follows an empty listing with a GET of the folder's own name (is it a file?): a
    second round trip for every empty or missing folder, which is most folders a build looks into.
    """
    from fsspec.asyn import sync  # deferred: as in object_exists

    bucket, key, _ = fs.split_path(p)
    folder = f"{bucket}/{key.rstrip('/')}/" if key else f"{bucket}/"
    listed: Any = sync(fs.loop, fs._do_list_objects, p)
    items, prefixes = listed
    # An object named like the folder itself (a folder marker) is not an entry of it.
    names = {posixpath.basename(entry["name"].rstrip("/")) for entry in items if entry["name"] != folder}
    names.update(posixpath.basename(sub.rstrip("/")) for sub in prefixes)
    names.discard("")
    return sorted(names)


def sha256_of(fs: Any, p: str, size: int) -> str:
    """The SHA-256 (hex) of the object ``p`` of ``size`` bytes, in ranged GETs of
    :data:`DIGEST_CHUNK` (opening it would first ask for its metadata: two more round trips)."""
    h = hashlib.sha256()
    for start in range(0, size, DIGEST_CHUNK):
        h.update(fs.cat_file(p, start=start, end=min(size, start + DIGEST_CHUNK)))
    return h.hexdigest()
