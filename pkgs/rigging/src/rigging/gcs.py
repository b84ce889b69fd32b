"""What :mod:`rigging.filesystem` does on ``gs://``, each in as few requests as gcsfs allows.

Every function takes the file system :func:`filesystem` makes (gcsfs with the store's request rules:
:mod:`rigging.gcs_client`) and a path without its ``gs://``. The ones that read and write records
(:func:`read_object`, :func:`write_object`, :func:`create_object`, :func:`delete_object`,
:func:`object_exists`, :func:`list_names`) also meet the calling thread's deadline
(:func:`rigging.store_requests.store_deadline`: a lease holder's fenced writes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from rigging.store_requests import RequestPolicy, caller_deadline, within

__all__ = ["DIGEST_CHUNK", "create_object", "delete_object", "filesystem", "list_names", "object_exists",
           "read_object", "sha256_of", "use_in_fsspec", "write_object"]

T = TypeVar("T")

DIGEST_CHUNK = 64 << 20
"""Bytes per ranged read when hashing an object of known size (one request each)."""


def filesystem() -> Any:
    """A ``gcsfs.core.GCSFileSystem`` for plain buckets that never answers from a cached listing."""
    # Plain buckets only. gcsfs picks its zonal/HNS subclass (which talks gRPC and hangs against
    # the local emulator) when GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT is unset *at its import*, which
    # may have happened before we run; so name the core class directly, and set the variable for
    # child processes that import gcsfs later.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from rigging.gcs_client import RetryingGCSFileSystem  # deferred: gcsfs, only where gs:// is used

    use_in_fsspec()
    policy = RequestPolicy.from_environ()
    # Other processes write the same bucket: a cached listing would hide their objects or report
    # stale sizes (and a read sized from a stale listing returns a truncated file). The policy is an
    # argument, so that fsspec's cache of instances hands out a new one when the settings change.
    return RetryingGCSFileSystem(use_listings_cache=False, store_timeout_s=policy.timeout_s,
                                 store_deadline_s=policy.deadline_s)


_CLIENT_CLASS = "rigging.gcs_client.RetryingGCSFileSystem"


def use_in_fsspec() -> None:
    """Make fsspec's ``gs://`` (and ``gcs://``) the store's file system, for the libraries that open
    gs:// paths through fsspec themselves (Orbax's checkpoint metadata, through ``etils.epath``):
    their requests are bounded, retried and counted as the engine's are. Lazily: gcsfs is imported
    when fsspec first makes one."""
    import fsspec
    from fsspec.registry import _registry  # fsspec.registry, the attribute, is a read-only view

    for protocol in ("gs", "gcs"):
        known = _registry.get(protocol)
        if known is None:
            fsspec.register_implementation(protocol, _CLIENT_CLASS, clobber=True)
        elif f"{known.__module__}.{known.__qualname__}" != _CLIENT_CLASS:
            from rigging.gcs_client import RetryingGCSFileSystem  # gcsfs is imported already

            fsspec.register_implementation(protocol, RetryingGCSFileSystem, clobber=True)


def run(fs: Any, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make()`` on ``fs``'s event loop, with this thread's deadline in force."""
    from fsspec.asyn import sync  # deferred: rigging.filesystem imports this module for local work too

    return sync(fs.loop, within, caller_deadline(), make)  # pyright: ignore[reportReturnType] - fsspec's sync is untyped


def object_exists(fs: Any, p: str) -> bool:
    """True when the object ``p`` exists: one GET of its metadata (``fs.exists`` may add listings
    to look for a folder of that name)."""
    try:
        run(fs, lambda: fs._get_object(p))
    except FileNotFoundError:
        return False
    return True


def read_object(fs: Any, p: str) -> bytes:
    """The whole content of the object ``p``, as one version of it: one GET, checked against the
    hash the store sends with it (a torn answer is read again)."""
    return bytes(run(fs, lambda: fs._cat_file(p)))


def delete_object(fs: Any, p: str) -> None:
    """Delete the object ``p``; a missing one (or one an earlier attempt of this call deleted) is fine."""
    try:
        run(fs, lambda: fs._rm_file(p))
    except FileNotFoundError:
        pass


def _md5(payload: bytes) -> str:
    return base64.b64encode(hashlib.md5(payload).digest()).decode()


def write_object(fs: Any, p: str, payload: bytes, *, if_generation_match: int | None = None) -> int:
    """Upload ``payload`` as the object ``p`` in one request; returns the generation written.

    Args:
        if_generation_match: write only if the object's live generation is this one (``0``: only
            if there is none), atomically on GCS; otherwise ``FileExistsError``.

    A precondition refused on a retry, after an attempt whose answer was lost (a reset, a 5xx after
    the write took effect), may be refusing this call's own earlier write: the object is then
    looked at, and taken as written by this call when its content digest (MD5) is that of
    ``payload``. So a create whose answer was lost is still a create, not a race lost. Records
    whose ownership matters (a lease names its holder, a success record its time) never have the
    same bytes from two writers.

    Raises:
        FileExistsError: the precondition failed (another writer's object is there).
    """
    from rigging.gcs_client import RetriedPreconditionFailed  # deferred: gcsfs, as in filesystem()

    bucket, key, _ = fs.split_path(p)
    boundary = f"marin-{uuid.uuid4().hex}"
    head = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
            f"{json.dumps({'name': key})}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n")
    body = head.encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    condition = {} if if_generation_match is None else {"ifGenerationMatch": str(if_generation_match)}

    async def upload() -> Any:
        return await fs._call("POST", f"{fs._location}/upload/storage/v1/b/{bucket}/o", uploadType="multipart",
                              headers={"Content-Type": f'multipart/related; boundary="{boundary}"'}, data=body,
                              json_out=True, **condition)

    try:
        written = run(fs, upload)
    except RetriedPreconditionFailed:
        there = run(fs, lambda: fs._get_object(p))
        if there.get("md5Hash") != _md5(payload):
            raise
        written = there
    fs.invalidate_cache(p)
    return int(written.get("generation") or 0)


def create_object(fs: Any, p: str, payload: bytes) -> bool:
    """Create the object ``p`` unless it exists; True when this call created it. One request
    (:func:`write_object` with ``ifGenerationMatch=0``).

    GCS creates the object only if no live generation of it exists, atomically, and answers 412
    otherwise, so of any number of concurrent creators exactly one gets True, also when its answer
    was lost and its retry refused (see :func:`write_object`). The strict test emulator
    (fake-gcs-server) enforces the precondition on multipart uploads (these), real GCS on every
    upload; ``gcp-storage-emulator`` ignores it.
    """
    try:
        write_object(fs, p, payload, if_generation_match=0)
    except FileExistsError:
        return False
    return True


def list_names(fs: Any, p: str) -> list[str]:
    """The names directly under the folder ``p``, sorted: one listing (a page per 1,000 names).

    gcsfs's ``ls`` follows an empty listing with a GET of the folder's own name (is it a file?): a
    second round trip for every empty or missing folder, which is most folders a build looks into.
    """
    bucket, key, _ = fs.split_path(p)
    folder = f"{bucket}/{key.rstrip('/')}/" if key else f"{bucket}/"
    listed: Any = run(fs, lambda: fs._do_list_objects(p))
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
