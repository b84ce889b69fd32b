"""Sinks that write a dataset's shards to files, each shard committed atomically, index last.

Layout of an output folder ``<out>`` (``<ext>`` is ``array_record`` or ``jsonl``)::

    <out>/<split>/part-00000.<ext>     one file per shard and split (``splits=("train", ...)``)
    <out>/part-00000.<ext>             ... or, without splits, one file per shard
    <out>/.commits/part-00000.json     commit record of shard 0: its files' stats and counters
    <out>/index.json                   the shard index, written after every shard is committed

ArrayRecord record format (the contract token readers rely on): one record per document, the
document's token ids as little-endian ``uint32`` (``np.asarray(ids, "<u4").tobytes()``), written by
``ArrayRecordWriter(path, "group_size:1,uncompressed")`` so every record can be read on its own
(uncompressed: token ids compress by about a third at best, while compression made writing five
times and reading twice as slow, measured on 130-token records); nothing is
appended (an end-of-sequence token is the loader's business). The files open directly with
``grain.ArrayRecordDataSource``.

JSON-lines format: one JSON object per line (keys sorted, UTF-8); a string record is written as
``{"text": record}``.

Commit protocol. A shard's files are written under temporary names (locally a hidden sibling
``.tmp-<uuid>-part-…``, for object stores a local temporary file), checksummed, then committed:
locally by rename, on object stores by one whole-object upload (an object appears whole or not at
all). The commit record is written after the shard's files; a shard is committed when its commit
record exists, names the same inputs and shard count, and its files have the recorded sizes.
A rerun skips committed shards and redoes the others, overwriting what they left.

The index's shape, and reading the shards back: :mod:`zephyr.shards`.
"""

from __future__ import annotations

import abc
import functools
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rigging import filesystem as fs
from zephyr.shards import INDEX_FILE, INDEX_KEYS, write_index
from zephyr.worker_context import Counters, WorkerContext

__all__ = ["ArrayRecordSink", "CollectSink", "JsonlSink", "Sink", "shard_name"]

_COMMITS = ".commits"
_TMP_PREFIX = ".tmp-"


def shard_name(index: int, extension: str) -> str:
    """The file name of shard ``index``: ``part-00000.<extension>``."""
    return f"part-{index:05d}.{extension}"


class Sink(abc.ABC):
    """Where a run's shards go; implementations must pickle (they travel to the workers)."""

    output_path: str | None

    def prepare(self, num_shards: int) -> None:
        """Driver, before any shard runs: clear what a killed earlier run may have left."""
        return None

    def committed(self, shard_index: int, num_shards: int, inputs: list[str]) -> dict[str, Any] | None:
        """Driver: the commit record of a shard already written from ``inputs``, else None."""
        return None

    @abc.abstractmethod
    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        """Worker: consume ``records``, commit the shard, return its commit record."""

    def finalize(self, shard_records: list[dict[str, Any]], counters: Counters) -> dict[str, Any] | None:
        """Driver, after every shard: write and return the index (None when there is none)."""
        return None


@dataclass(frozen=True)
class CollectSink(Sink):
    """Returns each shard's records to the driver instead of writing them (small results only)."""

    output_path: str | None = None

    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        items = list(records)
        return {"shard": ctx.shard_index, "records": items, "counters": dict(ctx.counters)}


class _OpenFile(abc.ABC):
    @abc.abstractmethod
    def write(self, record: Any) -> int:
        """Write one record; return its token count (0 where tokens mean nothing)."""

    @abc.abstractmethod
    def close(self) -> None: ...


class _ArrayRecordFile(_OpenFile):
    def __init__(self, path: str, options: str):
        from array_record.python.array_record_module import ArrayRecordWriter

        self._writer = ArrayRecordWriter(path, options)

    def write(self, record: Any) -> int:
        if isinstance(record, bytes):
            if len(record) % 4:
                raise ValueError(f"a token record must be whole uint32s, got {len(record)} bytes")
            self._writer.write(record)
            return len(record) // 4
        if isinstance(record, np.ndarray) and record.dtype.kind == "i" and record.size and record.min() < 0:
            raise ValueError(f"token ids must be >= 0, got {int(record.min())}")
        data = np.asarray(record, dtype="<u4")
        if data.ndim != 1:
            raise ValueError(f"a token record must be one-dimensional, got shape {data.shape}")
        self._writer.write(data.tobytes())
        return int(data.shape[0])

    def close(self) -> None:
        self._writer.close()


class _JsonlFile(_OpenFile):
    def __init__(self, path: str):
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, record: Any) -> int:
        if isinstance(record, str):
            record = {"text": record}
        self._file.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        return 0

    def close(self) -> None:
        self._file.close()


_SCRATCH_PREFIX = "zephyr-shard-"


@functools.cache
def _sweep_dead_scratch() -> None:
    """Once per process: remove the scratch folders of processes that are gone (killed runs)."""
    from rigging.lease import process_alive

    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name.removeprefix(_SCRATCH_PREFIX).split("-", 1)[0]
        if name.startswith(_SCRATCH_PREFIX) and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _scratch_folder() -> str:
    """A local folder for the files of a shard bound for an object store.

    Its name carries this process's id, so that a later process can tell a killed run's folder
    (left behind) from a live one and remove it (see :func:`_sweep_dead_scratch`).
    """
    _sweep_dead_scratch()
    return tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-")


def _commit(local_tmp: str, final: str) -> None:
    if fs.is_local(final):
        os.replace(local_tmp, fs.strip_protocol(final))
        return
    filesystem = fs.filesystem(final)
    filesystem.put_file(local_tmp, final)
    if fs.protocol_of(final) == "gs":
        filesystem.invalidate_cache(final)
    os.unlink(local_tmp)


class _FileSink(Sink):
    """Shared commit protocol of the file sinks; subclasses name the format and open files."""

    output_path: str
    splits: tuple[str, ...]
    metadata: Mapping[str, Any]
    format_name: str
    extension: str

    def _validate(self) -> None:
        if not self.output_path:
            raise ValueError(f"output_path must be a non-empty path, got {self.output_path!r}")
        object.__setattr__(self, "splits", tuple(self.splits))
        for split in self.splits:
            if not split or "/" in split or split.startswith((".", "_")):
                raise ValueError(f"split names must be plain folder names, got {split!r}")
        if len(set(self.splits)) != len(self.splits):
            raise ValueError(f"split names must be distinct, got {self.splits}")
        reserved = INDEX_KEYS & set(self.metadata)
        if reserved:
            raise ValueError(f"metadata may not set index keys {sorted(reserved)}")

    @abc.abstractmethod
    def _open(self, local_path: str) -> _OpenFile: ...

    def _relative(self, split: str | None, shard_index: int) -> str:
        name = shard_name(shard_index, self.extension)
        return f"{split}/{name}" if split else name

    def _commit_record_path(self, shard_index: int) -> str:
        return fs.join(self.output_path, _COMMITS, f"part-{shard_index:05d}.json")

    def prepare(self, num_shards: int) -> None:
        # The index says "complete"; it must not outlive a rerun that is rewriting shards.
        fs.delete(fs.join(self.output_path, INDEX_FILE))
        # Parts beyond the shard count (an earlier run with more shards) would be picked up by
        # readers that glob the folder, so they go.
        for folder in [*(fs.join(self.output_path, s) for s in self.splits or ("",)),
                       fs.join(self.output_path, _COMMITS)]:
            for name in fs.listdir(folder):
                number = name.removeprefix("part-").split(".", 1)[0]
                if name.startswith("part-") and number.isdigit() and int(number) >= num_shards:
                    fs.delete(fs.join(folder, name))
        if fs.is_local(self.output_path):
            # Temporary files of a killed writer: shard files, and commit records cut mid-write.
            for folder in [self.output_path, *(fs.join(self.output_path, s) for s in self.splits),
                           fs.join(self.output_path, _COMMITS)]:
                local = fs.strip_protocol(folder)
                if os.path.isdir(local):
                    for name in os.listdir(local):
                        if name.startswith(_TMP_PREFIX):
                            os.unlink(os.path.join(local, name))

    def committed(self, shard_index: int, num_shards: int, inputs: list[str]) -> dict[str, Any] | None:
        path = self._commit_record_path(shard_index)
        if not fs.exists(path):
            return None
        try:
            record = json.loads(fs.read_bytes(path))
        except (ValueError, UnicodeDecodeError):
            return None  # a damaged record commits nothing: the shard is redone
        if not isinstance(record, dict) or record.get("num_shards") != num_shards or record.get("inputs") != inputs:
            return None
        files = record.get("files")
        if not isinstance(files, dict) or set(files) != (set(self.splits) if self.splits else {""}):
            return None
        for info in files.values():
            rel = info.get("path") if isinstance(info, dict) else None
            if (not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/")
                    or type(info.get("bytes")) is not int):
                return None
            final = fs.join(self.output_path, rel)
            if not fs.exists(final) or fs.size(final) != info["bytes"]:
                return None
        return record

    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        keys: list[str | None] = list(self.splits) if self.splits else [None]
        local_out = fs.is_local(self.output_path)
        scratch = None if local_out else _scratch_folder()
        tmp_paths: dict[str | None, str] = {}
        finals: dict[str | None, str] = {}
        for key in keys:
            rel = self._relative(key, ctx.shard_index)
            finals[key] = fs.join(self.output_path, rel)
            name = f"{_TMP_PREFIX}{uuid.uuid4().hex}-{os.path.basename(rel)}"
            if local_out:
                folder = os.path.dirname(os.path.abspath(fs.strip_protocol(finals[key])))
                os.makedirs(folder, exist_ok=True)
                tmp_paths[key] = os.path.join(folder, name)
            else:
                tmp_paths[key] = os.path.join(scratch, name)  # type: ignore[arg-type]
        stats = {key: {"records": 0, "tokens": 0} for key in keys}
        opened: dict[str | None, _OpenFile] = {}
        try:
            opened = {key: self._open(tmp_paths[key]) for key in keys}
            if self.splits:
                for split, record in records:
                    if split not in opened:
                        raise ValueError(f"record for unknown split {split!r}; splits are {self.splits}")
                    stats[split]["tokens"] += opened[split].write(record)
                    stats[split]["records"] += 1
            else:
                writer = opened[None]
                counts = stats[None]
                for record in records:
                    counts["tokens"] += writer.write(record)
                    counts["records"] += 1
            for key in keys:
                opened.pop(key).close()
            files = {}
            for key in keys:
                files[key or ""] = {"path": self._relative(key, ctx.shard_index), **stats[key],
                                    "bytes": os.path.getsize(tmp_paths[key]),
                                    "sha256": fs.sha256_of(tmp_paths[key])}
                _commit(tmp_paths[key], finals[key])
        finally:
            for handle in opened.values():
                handle.close()
            for tmp in tmp_paths.values():
                if os.path.exists(tmp):
                    os.unlink(tmp)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        record = {"shard": ctx.shard_index, "num_shards": ctx.num_shards, "inputs": inputs, "files": files,
                  "counters": dict(sorted(ctx.counters.items()))}
        # Written last: its presence is what makes the shard committed.
        fs.atomic_write(self._commit_record_path(ctx.shard_index), json.dumps(record, sort_keys=True, indent=1))
        return record

    def finalize(self, shard_records: list[dict[str, Any]], counters: Counters) -> dict[str, Any]:
        ordered = sorted(shard_records, key=lambda r: r["shard"])

        def summary(key: str) -> dict[str, Any]:
            shards = [r["files"][key] for r in ordered]
            return {"records": sum(s["records"] for s in shards), "tokens": sum(s["tokens"] for s in shards),
                    "shards": shards}

        index: dict[str, Any] = {"format": self.format_name, **self.metadata, "counters": dict(counters)}
        if self.splits:
            index["splits"] = {split: summary(split) for split in self.splits}
        else:
            index.update(summary(""))
        write_index(self.output_path, index)
        return index


@dataclass(frozen=True)
class ArrayRecordSink(_FileSink):
    """Token sequences to ArrayRecord shards (record format in the module docstring).

    Records are token id sequences (lists, uint32-compatible arrays, or ready ``<u4`` bytes);
    with ``splits`` they are ``(split, ids)`` pairs.

    Attributes:
        output_path: the output folder (any fsspec URL).
        splits: split folder names; empty for one flat set of shards.
        metadata: extra top-level index entries (e.g. ``vocab_size``, ``eos_id``).
        format_name: the index's ``format`` value.
        options: array_record writer options; ``group_size:1`` keeps records individually readable,
            ``uncompressed`` trades about 1.5x the bytes for 5x faster writes and 2x faster reads.
    """

    output_path: str
    splits: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    format_name: str = "zephyr.array_record/v1"
    options: str = "group_size:1,uncompressed"
    extension: str = field(default="array_record", init=False)

    def __post_init__(self) -> None:
        self._validate()

    def _open(self, local_path: str) -> _OpenFile:
        return _ArrayRecordFile(local_path, self.options)


@dataclass(frozen=True)
class JsonlSink(_FileSink):
    """Records (dicts, or strings written as ``{"text": ...}``) to JSON-lines shards.

    Attributes:
        output_path: the output folder (any fsspec URL).
        splits: split folder names; empty for one flat set of shards (records are then plain,
            with splits ``(split, record)`` pairs).
        metadata: extra top-level index entries.
        format_name: the index's ``format`` value.
    """

    output_path: str
    splits: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    format_name: str = "zephyr.jsonl/v1"
    extension: str = field(default="jsonl", init=False)

    def __post_init__(self) -> None:
        self._validate()

    def _open(self, local_path: str) -> _OpenFile:
        return _JsonlFile(local_path)
