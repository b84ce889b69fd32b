"""The shard folder format: its index (``index.json``), token records, and reading shards back.

A file sink (:mod:`zephyr.writers`) leaves a folder of shards and, last, its index; this module is
the one place that writes, parses and verifies that index, decodes token records, copies remote
shards to local disk and reads token shards. Shape of the index (keys sorted)::

    {"format": ..., <metadata>..., "counters": {...},
     "splits": {"train": {"records": n, "tokens": t,
                          "shards": [{"path": "train/part-00000.array_record", "records": n,
                                      "tokens": t, "bytes": b, "sha256": hex}, ...]}, ...}}

Without splits, ``records``, ``tokens`` and ``shards`` sit at the top level instead of ``splits``.

Token records (ArrayRecord shards): one record per document, its token ids as little-endian
``uint32``. A *tokenized dataset* (format :data:`TOKENIZED_FORMAT`) is such a folder with splits
whose index also names the tokenizer's ``vocab_size`` and ``eos_id``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from rigging import filesystem as fs
from zephyr.errors import DataError

__all__ = [
    "INDEX_FILE",
    "INDEX_KEYS",
    "TOKENIZED_FORMAT",
    "TokenShardReader",
    "decode_tokens",
    "default_cache_dir",
    "index_groups",
    "local_shard",
    "read_index",
    "verify_shard_index",
    "write_index",
]

INDEX_FILE = "index.json"
TOKENIZED_FORMAT = "marin.tokenized/v1"
# Keys of the index that the writer owns (metadata may not set them).
INDEX_KEYS = frozenset({"format", "splits", "counters", "records", "tokens", "shards"})


def decode_tokens(record: bytes) -> np.ndarray:
    """The token ids of one record (little-endian uint32 bytes), as a read-only uint32 array."""
    return np.frombuffer(record, dtype="<u4")


def write_index(folder: str, index: dict[str, Any]) -> None:
    """Write ``<folder>/index.json`` atomically (keys sorted): the mark that the folder is complete."""
    fs.atomic_write(fs.join(folder, INDEX_FILE), json.dumps(index, sort_keys=True, indent=2) + "\n")


def index_groups(index: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(split name, {"records", "tokens", "shards"})`` of each split; ``("", index)`` without splits."""
    if "splits" in index:
        return list(index["splits"].items())
    return [("", index)]


def read_index(folder: str, *, format_name: str | None = None, required: Iterable[str] = ()) -> dict[str, Any]:
    """``<folder>/index.json`` parsed and checked for the shape in the module docstring.

    Args:
        folder: the shard folder (any fsspec URL).
        format_name: when given, the index's ``format`` must be this.
        required: further top-level keys the index must have (``vocab_size``, ...).

    Raises:
        DataError: the index is missing (an interrupted run), not JSON, or not the shape expected.
    """
    index_path = fs.join(folder, INDEX_FILE)
    try:
        text = fs.read_bytes(index_path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise DataError(index_path, "", "no shard index (the output is incomplete: was the run interrupted?)") from None
    try:
        index = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(index_path, "", f"not valid JSON: {e}") from None
    if not isinstance(index, dict):
        raise DataError(index_path, "", f"expected a JSON object, got {type(index).__name__}")
    if format_name is not None and index.get("format") != format_name:
        raise DataError(index_path, "", f"format must be {format_name!r}, got {index.get('format')!r}")
    for key in required:
        if key not in index:
            raise DataError(index_path, "", f"missing field {key!r}")
    splits = index.get("splits")
    if "splits" in index and not (isinstance(splits, dict) and splits):
        raise DataError(index_path, "", "'splits' must be a non-empty object of split name -> shards")
    for name, group in index_groups(index):
        where = f"split {name!r}" if name else "index"
        shards = group.get("shards") if isinstance(group, dict) else None
        if not isinstance(shards, list):
            raise DataError(index_path, "", f"{where} has no list of shards")
        for i, shard in enumerate(shards):
            ok = (isinstance(shard, dict) and isinstance(shard.get("path"), str) and shard["path"]
                  and not shard["path"].startswith("/") and ".." not in shard["path"].split("/")
                  and type(shard.get("bytes")) is int and isinstance(shard.get("sha256"), str))
            if not ok:
                raise DataError(index_path, "", f"{where}: shard {i} is not {{path (relative), bytes, sha256}}")
    return index


def verify_shard_index(folder: str) -> dict[str, Any]:
    """Check every shard listed in ``<folder>/index.json`` against its recorded size and sha256.

    Returns:
        The index.

    Raises:
        DataError: the index is missing or malformed, or a shard is missing, has another size or checksum.
    """
    index = read_index(folder)
    for _name, group in index_groups(index):
        for shard in group["shards"]:
            path = fs.join(folder, shard["path"])
            if not fs.exists(path):
                raise DataError(path, "", f"shard listed in {INDEX_FILE} is missing")
            size = fs.size(path)
            if size != shard["bytes"]:
                raise DataError(path, "", f"shard is {size} bytes, {INDEX_FILE} says {shard['bytes']} (truncated?)")
            if fs.sha256_of(path) != shard["sha256"]:
                raise DataError(path, "", f"shard content does not match its sha256 in {INDEX_FILE}")
    return index


def default_cache_dir() -> str:
    """Where :func:`local_shard` keeps copies of remote shards unless told otherwise."""
    return os.path.join(tempfile.gettempdir(), "zephyr-cache")


def _download(remote: str, target: str) -> str:
    """Copy ``remote`` to the local file ``target``; the SHA-256 (hex) of what was copied, hashed
    as it passes (one read of the shard, not a copy and then a second read)."""
    digest = hashlib.sha256()
    with fs.open_file(remote, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(1 << 22):
            digest.update(chunk)
            dst.write(chunk)
    return digest.hexdigest()


def local_shard(path: str, sha256: str, cache_dir: str | None = None) -> str:
    """A local file holding shard ``path``: the file itself when local, else a verified copy.

    array_record cannot be handed gs:// paths reliably (it hangs against the GCS emulator), so a
    remote shard is copied once into ``cache_dir``, under a name keyed by its content hash (a
    rewritten shard gets a new copy), and checked against ``sha256`` before it is used.

    Raises:
        DataError: the shard is missing or its content does not match ``sha256``.
    """
    if fs.is_local(path):
        return fs.strip_protocol(path)
    cache_dir = cache_dir or default_cache_dir()
    target = os.path.join(cache_dir, f"{sha256[:32]}-{os.path.basename(path)}")
    if os.path.exists(target):
        return target
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        digest = _download(path, tmp)
        if digest != sha256:
            raise DataError(path, "", f"copied shard has sha256 {digest}, {INDEX_FILE} says {sha256}")
        os.replace(tmp, target)
    except FileNotFoundError:
        raise DataError(path, "", "file not found") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


class TokenShardReader:
    """Random access to one ArrayRecord token shard (records of little-endian uint32 token ids).

    A remote shard is first copied to a local temporary file (removed by :meth:`close`), because
    array_record cannot be pointed at object stores reliably. A truncated or damaged shard raises
    :class:`DataError` naming the file and, where it can be known, the record.
    """

    def __init__(self, path: str):
        self.path = path
        self._local_copy: str | None = None
        if fs.is_local(path):
            local = fs.strip_protocol(path)
        else:
            handle, local = tempfile.mkstemp(suffix=".array_record", prefix="zephyr-")
            os.close(handle)
            self._local_copy = local
            try:
                _download(path, local)
            except FileNotFoundError:
                self._drop_copy()
        if not os.path.exists(local):
            raise DataError(path, "", "file not found")
        from array_record.python.array_record_module import ArrayRecordReader

        problem = ""
        try:
            self._reader = ArrayRecordReader(local)
            # A damaged footer does not fail the constructor: the reader reports zero records
            # and ok() is False, which would read as a silently empty shard.
            if not self._reader.ok():
                self._reader.read()
                problem = "reader not ok"
        except RuntimeError as e:
            problem = str(e)
        if problem:
            self._drop_copy()
            raise DataError(path, "", f"truncated or corrupt ArrayRecord shard (its footer is unreadable, "
                                      f"so no record can be located): {problem}")
        self._len = int(self._reader.num_records())

    def _drop_copy(self) -> None:
        if self._local_copy is not None:
            os.unlink(self._local_copy)
            self._local_copy = None

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < self._len:
            raise IndexError(f"{self.path}: record {index} out of range (shard has {self._len})")
        try:
            data = self._reader.read([index])[0]
        except RuntimeError as e:
            raise DataError(self.path, f"record {index}", f"unreadable (truncated or corrupt shard): {e}") from None
        if len(data) % 4:
            raise DataError(self.path, f"record {index}", f"{len(data)} bytes is not a whole number of uint32 tokens")
        return decode_tokens(data)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self._len):
            yield self[i]

    def close(self) -> None:
        """Release the file (and remove a local copy of a remote shard)."""
        self._reader.close()
        self._drop_copy()

    def __enter__(self) -> TokenShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
