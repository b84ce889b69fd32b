"""File helpers over fsspec shared by every package: local paths, ``gs://`` and ``memory://``.

Every function takes a path or URL string. Local paths may be relative; they are used as given
(callers decide whether to make them absolute). Writes of small files are atomic: readers see
either the old content or the new content, never a torn file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import shutil
import threading
import uuid
from collections.abc import Iterator
from typing import IO, Any

from rigging import gcs

__all__ = ["atomic_write", "copy_file", "create_if_absent", "delete", "exists", "filesystem", "glob", "is_local",
           "join", "listdir", "makedirs", "open_file", "open_url", "protocol_of", "read_bytes", "read_text", "rm_tree",
           "sha256_of", "size", "strip_protocol", "walk_files"]


def protocol_of(path: str) -> str:
    """Return the fsspec protocol of ``path`` (``"file"`` for plain local paths)."""
    if "://" in path:
        return path.split("://", 1)[0]
    return "file"


def is_local(path: str) -> bool:
    """True when ``path`` is on the local file system."""
    return protocol_of(path) in ("file", "local")


def filesystem(path: str) -> Any:
    """Return the fsspec file system for ``path`` (cached per protocol by fsspec).

    Typed ``Any``: fsspec's methods carry no annotations, and what a checker infers from their
    bodies is wrong (``_strip_protocol`` as ``list | str``, ``size`` as optional).
    """
    import fsspec  # deferred: planning cached local steps never needs it

    protocol = protocol_of(path)
    if protocol == "gs":
        return gcs.filesystem()
    return fsspec.filesystem(protocol)


def strip_protocol(path: str) -> str:
    """Return ``path`` without its ``scheme://`` (local paths unchanged)."""
    return path.split("://", 1)[1] if "://" in path else path


def _fs_path(path: str) -> tuple[Any, str]:
    fs = filesystem(path)
    if is_local(path):
        return fs, strip_protocol(path)
    if protocol_of(path) == "memory":
        return fs, "/" + strip_protocol(path).lstrip("/")
    return fs, strip_protocol(path)


def _with_protocol(original: str, found: str) -> str:
    """Spell a path returned by fsspec the way ``original`` was spelled (scheme, relative or not)."""
    protocol = protocol_of(original)
    if protocol in ("file", "local"):
        if "://" in original:
            return f"{protocol}://{found}"
        if not os.path.isabs(original):
            # fsspec answers with absolute paths; callers gave a relative one and get relative ones.
            return os.path.relpath(found).replace(os.sep, "/")
        return found
    return f"{protocol}://{found.lstrip('/')}"


def join(base: str, *parts: str) -> str:
    """Join path components with ``/`` (also for local paths, which are POSIX here)."""
    out = base
    for part in parts:
        if not part:
            continue
        out = out.rstrip("/") + "/" + part.lstrip("/")
    return out


def exists(path: str) -> bool:
    """True when a file or folder exists at ``path``."""
    if is_local(path):
        return os.path.exists(strip_protocol(path))  # no fsspec import on the hot local path
    fs, p = _fs_path(path)
    return bool(fs.exists(p))


def file_exists(path: str) -> bool:
    """True when a file (not a folder) exists at ``path``: on GCS one request (an object GET),
    where :func:`exists` may take three (a GET, then listings to look for a folder)."""
    if is_local(path):
        return os.path.isfile(strip_protocol(path))
    fs, p = _fs_path(path)
    if protocol_of(path) != "gs":
        return bool(fs.isfile(p))
    return gcs.object_exists(fs, p)


def makedirs(path: str) -> None:
    """Create the folder ``path`` and its parents (a no-op on object stores)."""
    if is_local(path):
        os.makedirs(strip_protocol(path), exist_ok=True)
        return
    fs, p = _fs_path(path)
    fs.makedirs(p, exist_ok=True)


def read_bytes(path: str) -> bytes:
    """Return the whole content of ``path``, as one version of it even while it is rewritten.

    One whole-object GET on object stores (a ranged read sized by an earlier metadata call can
    mix two versions); a private copy on ``memory://``, whose open files share one position.
    """
    if is_local(path):
        # Local paths skip fsspec altogether (its import alone costs tens of milliseconds).
        with open(strip_protocol(path), "rb") as f:
            return f.read()
    fs, p = _fs_path(path)
    return gcs.read_object(fs, p) if protocol_of(path) == "gs" else bytes(fs.cat_file(p))


def read_text(path: str) -> str:
    """Return the whole content of ``path`` decoded as UTF-8."""
    return read_bytes(path).decode("utf-8")


def open_file(path: str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """Open ``path`` through fsspec (binary by default).

    For a file that another writer may replace meanwhile, use :func:`read_bytes`: a streamed
    read of a gs:// object is several ranged requests and is not atomic.
    """
    fs, p = _fs_path(path)
    if "w" in mode and is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(p)) or ".", exist_ok=True)
    if protocol_of(path) == "memory" and mode in ("r", "rb", "rt"):
        # memory:// hands every reader the same BytesIO (one shared position): read a copy.
        data = io.BytesIO(bytes(fs.cat_file(p)))
        if "b" in mode:
            return data
        return io.TextIOWrapper(data, encoding=kwargs.get("encoding") or "utf-8", newline=kwargs.get("newline"))
    return fs.open(p, mode, **kwargs)


open_url = open_file
"""Marin's name for :func:`open_file` (``open_url(path, "w")`` in its experiment files)."""


def size(path: str) -> int:
    """Size of the file at ``path`` in bytes."""
    if is_local(path):
        return os.path.getsize(strip_protocol(path))
    fs, p = _fs_path(path)
    return int(fs.size(p))


def sha256_of(path: str, size: int | None = None) -> str:
    """The SHA-256 (hex) of the content of the file at ``path``, read as a stream.

    Args:
        size: the file's size when the caller has just listed it: on an object store the content
            is then read in ranged GETs of :data:`rigging.gcs.DIGEST_CHUNK` bytes (one request for most
            files) instead of opening it, which first asks for its metadata (gcsfs: two more
            round trips per file).
    """
    if is_local(path):
        # The builtin file avoids importing fsspec for local work (see test_filesystem).
        with open(strip_protocol(path), "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    if size is not None and protocol_of(path) == "gs":
        fs, p = _fs_path(path)
        return gcs.sha256_of(fs, p, size)
    with open_file(path, "rb") as f:
        # fsspec's files and BytesIO have readinto, which IO[Any] does not promise.
        return hashlib.file_digest(f, "sha256").hexdigest()  # pyright: ignore[reportArgumentType]


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _tmp_sibling(p: str) -> str:
    """A temporary name beside the local path ``p`` (its folder made), to be renamed or linked over it."""
    parent = os.path.dirname(os.path.abspath(p))
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, f".tmp-{uuid.uuid4().hex}-{os.path.basename(p)}")


def atomic_write(path: str, data: bytes | str, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers never see a partial file.

    Locally: write a temporary sibling, fsync, rename over the target. On object stores a single
    PUT is already atomic (the object appears whole or not at all).

    Args:
        durable: fsync before the rename (locally), so the file survives a power loss whole.
            Records that are worthless after a machine crash (leases, progress notes, indexes
            rebuilt from the durable records) skip it: an fsync costs milliseconds on busy disks.
    """
    payload = _as_bytes(data)
    if is_local(path):
        p = strip_protocol(path)
        tmp = _tmp_sibling(p)
        try:
            with open(tmp, "wb") as f:
                f.write(payload)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, p)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return
    fs, p = _fs_path(path)
    if protocol_of(path) == "gs":
        gcs.write_object(fs, p, payload)
    else:
        fs.pipe_file(p, payload)


def _hard_link(src: str, dst: str) -> bool:
    """Link ``dst`` to ``src``; False where the file system does not allow it (another device ...)."""
    try:
        return os.link(src, dst) is None
    except OSError:
        return False


def copy_file(src: str, dst: str, *, link: bool = False) -> None:
    """Copy the file ``src`` to ``dst``, which readers see whole or not at all: inside one object
    store a copy made by the store itself (on GCS a rewrite: no bytes through this machine), else
    a streamed copy into a temporary sibling renamed over ``dst`` (locally) or one upload.

    ``link``: locally, a hard link where the file system allows (no copy): only for a ``src`` never
    written in place, such as a finished step's file, since the two names then share one file.
    """
    if is_local(src) and is_local(dst):
        tmp = _tmp_sibling(strip_protocol(dst))
        try:
            if not (link and _hard_link(strip_protocol(src), tmp)):
                shutil.copyfile(strip_protocol(src), tmp)
            os.replace(tmp, strip_protocol(dst))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    elif protocol_of(src) == protocol_of(dst):
        fs, p = _fs_path(src)
        fs.copy(p, _fs_path(dst)[1])
    else:
        atomic_write(dst, read_bytes(src))


# memory:// stores live in this process; this makes its check-then-write one step for threads.
_MEMORY_CREATE_LOCK = threading.Lock()


def create_if_absent(path: str, data: bytes | str, *, durable: bool = True, listed_absent: bool = False) -> bool:
    """Atomically create ``path`` with ``data`` unless it exists; True when this call created it.

    Every precondition the store relies on (lease numbers, success records, cache entries) is
    this function. Locally it is a hard link of a fully written temporary file (link fails if the
    target exists), so the file is never seen half-written. On GCS it is an upload with the
    precondition ``ifGenerationMatch=0`` (:func:`rigging.gcs.create_object`), which GCS refuses
    with 412 when the object exists. On ``memory://`` a check and write under one lock of this
    process. ``durable`` as for :func:`atomic_write`.

    Args:
        listed_absent: the caller has just listed the folder and ``path`` was not in it: on GCS
            skip the look before the write (a round trip that saves an upload where the object
            is likely there; the precondition is what refuses an object that appeared since).
    """
    payload = _as_bytes(data)
    protocol = protocol_of(path)
    if is_local(path):
        p = strip_protocol(path)
        tmp = _tmp_sibling(p)
        with open(tmp, "wb") as f:
            f.write(payload)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        try:
            os.link(tmp, p)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
    fs, p = _fs_path(path)
    if protocol == "gs":
        if not listed_absent and gcs.object_exists(fs, p):
            return False
        return gcs.create_object(fs, p, payload)
    with _MEMORY_CREATE_LOCK:
        if fs.exists(p):
            return False
        fs.pipe_file(p, payload)
        return True


def delete(path: str) -> None:
    """Remove the file at ``path`` if it exists."""
    if is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(strip_protocol(path))
        return
    fs, p = _fs_path(path)
    with contextlib.suppress(FileNotFoundError):
        gcs.delete_object(fs, p) if protocol_of(path) == "gs" else fs.rm_file(p)


def rm_tree(path: str) -> None:
    """Remove ``path`` and everything below it; a missing path is not an error."""
    if is_local(path):
        p = strip_protocol(path)
        if os.path.islink(p) or os.path.isfile(p):
            os.unlink(p)
        elif os.path.isdir(p):
            shutil.rmtree(p)
        return
    fs, p = _fs_path(path)
    try:
        fs.rm(p, recursive=True)
    except FileNotFoundError:
        pass


def glob(pattern: str) -> list[str]:
    """Return the paths matching ``pattern``, sorted, with the pattern's protocol kept."""
    fs, p = _fs_path(pattern)
    return sorted(_with_protocol(pattern, found) for found in fs.glob(p))


def listdir(path: str) -> list[str]:
    """Return the names (not paths) directly under the folder ``path``, sorted; [] if missing."""
    if is_local(path):
        p = strip_protocol(path)
        try:
            return sorted(os.listdir(p))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return [os.path.basename(p)]  # as fsspec lists a file: itself
    fs, p = _fs_path(path)
    if protocol_of(path) == "gs":
        return gcs.list_names(fs, p)
    try:
        entries = fs.ls(p, detail=False)
    except FileNotFoundError:
        return []
    names = {posixpath.basename(e.rstrip("/")) for e in entries}
    names.discard("")
    return sorted(names)


def walk_files(path: str) -> Iterator[tuple[str, int]]:
    """Yield ``(relative_path, size)`` for every file below the folder ``path``, sorted."""
    if is_local(path):
        root = os.path.abspath(strip_protocol(path))
        found = []
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                try:
                    size = os.path.getsize(full)
                except FileNotFoundError:
                    if not os.path.islink(full):
                        continue  # removed while we walked
                    size = os.lstat(full).st_size  # a dangling link is listed; reading it will fail
                found.append((os.path.relpath(full, root).replace(os.sep, "/"), size))
        yield from sorted(found)
        return
    fs, p = _fs_path(path)
    try:
        details = fs.find(p, detail=True)
    except FileNotFoundError:
        return
    # fsspec spells found paths like its own _strip_protocol does (memory:// keeps a leading /).
    base = fs._strip_protocol(p).rstrip("/") + "/"
    rows = []
    for full, info in details.items():
        # Skip folder markers and anything not strictly below the folder (``path`` itself when
        # it names a file, which the local branch does not list either).
        if info.get("type") == "directory" or not full.startswith(base):
            continue
        rows.append((full[len(base):], int(info.get("size") or 0)))
    yield from sorted(rows)
