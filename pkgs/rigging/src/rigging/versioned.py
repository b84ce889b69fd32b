"""Conditional writes of small records: read a file with its version, write it back only if
nobody replaced it meanwhile (compare-and-swap), so that two writers that read, change and write
the same record never lose one another's change: the loser reads again and redoes its change.

* ``gs://``: the object's generation, read with it in one GET (``X-Goog-Generation``); the write is
  an upload with the precondition ``ifGenerationMatch`` (``0``: only if absent), which GCS refuses
  with 412 when another write came first. A server that does not send the generation with the
  content (gcp-storage-emulator) is asked for it only when a write follows, and the content at that
  generation must be what was read: a reader that writes nothing pays one request, as on GCS.
* local: a file that does not exist yet is created by :func:`rigging.filesystem.create_if_absent`
  (a hard link: exactly one creator wins); one that exists is replaced by an atomic rename, under
  an exclusive ``flock`` of a lock file beside it and only if its inode, size and ``mtime_ns`` are
  still those read (every write replaces the file by a rename: a new inode each time).
* ``memory://``: a check and a write under one lock of this process.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rigging import filesystem as fs

__all__ = ["Versioned", "read_versioned", "write_if_unchanged"]


# memory:// stores live in this process: its compare and write are one step for threads.
_MEMORY_LOCK = threading.Lock()


@dataclass(frozen=True)
class Versioned:
    """What a file held when it was read, and which version of it that was."""

    data: bytes | None
    """Its content; None when it did not exist."""
    version: Any = None
    """Opaque: what :func:`write_if_unchanged` compares (None with ``data`` None: absent)."""


def read_versioned(path: str) -> Versioned:
    """The content of ``path`` and its version (absent: ``Versioned(None)``)."""
    protocol = fs.protocol_of(path)
    if fs.is_local(path):
        p = fs.strip_protocol(path)
        try:
            with open(p, "rb") as f:
                info = os.fstat(f.fileno())
                return Versioned(f.read(), (info.st_ino, info.st_size, info.st_mtime_ns))
        except FileNotFoundError:
            return Versioned(None)
    if protocol == "gs":
        return _gcs_read(path)
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return Versioned(None)
    return Versioned(data, data)


def write_if_unchanged(path: str, data: bytes | str, seen: Versioned) -> bool:
    """Write ``data`` to ``path`` if it is still as ``seen`` (:func:`read_versioned`) found it;
    False, writing nothing, when another write came in between."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if seen.data is None:
        return fs.create_if_absent(path, payload, durable=False)
    if fs.is_local(path):
        return _local_replace(fs.strip_protocol(path), payload, seen.version)
    if fs.protocol_of(path) == "gs":
        return _gcs_upload(path, payload, seen.version)
    with _MEMORY_LOCK:
        if read_versioned(path).version != seen.version:
            return False
        fs.atomic_write(path, payload)
        return True


# ---------------------------------------------------------------------------------------------- local


@contextlib.contextmanager
def _locked(p: str) -> Iterator[None]:
    """An exclusive ``flock`` of ``.<name>.lock`` beside ``p``: writers of ``p`` take turns."""
    import fcntl  # POSIX: local stores are on the machines this runs on

    folder, name = os.path.split(os.path.abspath(p))
    fd = os.open(os.path.join(folder, f".{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _local_replace(p: str, payload: bytes, version: Any) -> bool:
    tmp = os.path.join(os.path.dirname(os.path.abspath(p)), f".tmp-{uuid.uuid4().hex}-{os.path.basename(p)}")
    with open(tmp, "wb") as f:
        f.write(payload)
    try:
        with _locked(p):
            try:
                info = os.stat(p)
            except FileNotFoundError:
                return False
            if (info.st_ino, info.st_size, info.st_mtime_ns) != version:
                return False
            os.replace(tmp, p)
            return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# ---------------------------------------------------------------------------------------------- gs://


def _gcs(path: str) -> tuple[Any, str, str]:
    gfs = fs.filesystem(path)
    bucket, key, _ = gfs.split_path(fs.strip_protocol(path))
    return gfs, bucket, key


def _gcs_read(path: str) -> Versioned:
    from rigging import gcs  # its requests: bounded, retried, counted, a torn answer read again

    gfs, bucket, key = _gcs(path)
    try:
        answer: Any = gcs.run(gfs, lambda: gfs._call("GET", "b/{}/o/{}", bucket, key, alt="media"))
        headers, body = answer
        generation = {k.lower(): v for k, v in headers.items()}.get("x-goog-generation")
    except FileNotFoundError:
        return Versioned(None)
    # No generation (gcp-storage-emulator): the content stands for it until a write needs it.
    return Versioned(bytes(body), str(generation) if generation is not None else _Unversioned(bytes(body)))


@dataclass(frozen=True)
class _Unversioned:
    """The version of an object read from a server that did not say its generation: its content."""

    data: bytes


def _gcs_generation_of(path: str, data: bytes) -> str | None:
    """The generation of ``path`` whose content is ``data`` (asked for, then that generation read);
    None when the object is gone or holds other content now."""
    from rigging import gcs

    gfs, bucket, key = _gcs(path)
    try:
        metadata: Any = gcs.run(gfs, lambda: gfs._get_object(f"{bucket}/{key}"))
        generation = metadata["generation"]
        answer: Any = gcs.run(gfs, lambda: gfs._call("GET", "b/{}/o/{}", bucket, key, alt="media",
                                                     generation=generation))
    except FileNotFoundError:
        return None
    return str(generation) if bytes(answer[1]) == data else None


def _gcs_upload(path: str, payload: bytes, generation: Any) -> bool:
    """One upload of ``payload`` to ``path`` with ``ifGenerationMatch=generation``
    (:func:`rigging.gcs.write_object`: a write whose answer was lost is still recognised as this one's)."""
    from rigging import gcs

    if isinstance(generation, _Unversioned):
        generation = _gcs_generation_of(path, generation.data)
        if generation is None:
            return False  # replaced since it was read
    gfs = fs.filesystem(path)
    try:
        gcs.write_object(gfs, fs.strip_protocol(path), payload, if_generation_match=int(generation))
    except FileExistsError:  # 412: another write came first
        return False
    return True
