"""Files written shard by shard, each shard committed atomically, its commit record written last.

Layout of an output folder ``<out>`` (``<ext>`` names the format)::

    <out>/<split>/part-00000.<ext>     one file per shard and split (``splits=("train", ...)``)
    <out>/part-00000.<ext>             ... or, without splits, one file per shard
    <out>/.commits/part-00000.json     commit record of shard 0: its files' stats and counters
    <out>/index.json                   the shard index, written after every shard is committed

Commit protocol. A shard's files are written under temporary names (locally a hidden sibling
``.tmp-<uuid>-part-…``, for object stores a local temporary file), checksummed, then committed:
locally by rename, on object stores by one whole-object upload (an object appears whole or not at
all). The commit record is written after the shard's files; a shard is committed when its commit
record exists, names the same inputs and shard count, and its files have the recorded sizes.
A rerun skips committed shards and redoes the others, overwriting what they left.

The formats (ArrayRecord, JSON lines) are in :mod:`zephyr.writers`, the shuffle's partition files
in :mod:`zephyr.shuffle`; the index's shape, and reading the shards back: :mod:`zephyr.shards`.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from rigging import filesystem as fs
from rigging.tempdirs import LEFTOVER_KINDS, ZEPHYR_SHARD, dead_tempdirs, owned_tempdir
from zephyr.shards import INDEX_FILE, INDEX_KEYS, write_index
from zephyr.sink import Sink, shard_name
from zephyr.worker_context import Counters, WorkerContext

__all__ = ["FileSink", "OpenFile"]

_COMMITS = ".commits"
_TMP_PREFIX = ".tmp-"


class OpenFile(abc.ABC):
    """One shard file being written (under its temporary name) in some format."""

    @abc.abstractmethod
    def write(self, record: Any) -> int:
        """Write one record; return its token count (0 where tokens mean nothing)."""

    @abc.abstractmethod
    def close(self) -> dict[str, Any]:
        """Finish the file; return entries to add to the file's stats in the commit record."""

    def discard(self) -> None:
        """Release the file after a failure (it is deleted unread)."""
        self.close()


@functools.cache
def _sweep_dead_scratch() -> None:
    """Once per process: remove the scratch folders of processes that are gone (killed runs)."""
    for dead in dead_tempdirs(prefixes={ZEPHYR_SHARD: LEFTOVER_KINDS[ZEPHYR_SHARD]}):
        shutil.rmtree(dead.path, ignore_errors=True)


def _scratch_folder() -> str:
    """A local folder for the files of a shard bound for an object store.

    Its name carries this process's id, so that a later process can tell a killed run's folder
    (left behind) from a live one and remove it (see :func:`_sweep_dead_scratch`).
    """
    _sweep_dead_scratch()
    return owned_tempdir(ZEPHYR_SHARD)


def _commit(local_tmp: str, final: str) -> None:
    if fs.is_local(final):
        os.replace(local_tmp, fs.strip_protocol(final))
        return
    filesystem = fs.filesystem(final)
    filesystem.put_file(local_tmp, final)
    if fs.protocol_of(final) == "gs":
        filesystem.invalidate_cache(final)
    os.unlink(local_tmp)


class FileSink(Sink):
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
    def _open(self, local_path: str) -> OpenFile: ...

    def shard_path(self, split: str | None, shard_index: int) -> str:
        """Where shard ``shard_index`` of ``split`` (None: without splits) lies, relative to the output."""
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
        record = self._commit_record(shard_index)  # a damaged record commits nothing: the shard is redone
        if record is None or record.get("num_shards") != num_shards or record.get("inputs") != inputs:
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

    def adopt_shard(self, earlier: str, earlier_index: int, shard_index: int, num_shards: int,
                    inputs: list[str]) -> bool:
        """Commit shard ``shard_index`` as a copy of shard ``earlier_index`` of ``earlier`` (an
        output of the same sink made from the same input file): its files are copied under this
        shard's names and its commit record, naming this run's shard count and inputs, is written
        last, as :meth:`write_shard` would have written it. The caller vouches that the input is
        the same (by content); the copy is then byte for byte what writing the shard would make.
        False, with nothing written, when ``earlier`` has no committed shard ``earlier_index``.
        """
        old = dataclasses.replace(self, output_path=earlier)
        record = old._commit_record(earlier_index)
        if record is None or old.committed(earlier_index, record.get("num_shards"), record.get("inputs")) is None:
            return False
        files = {}
        for key, info in record["files"].items():
            rel = self.shard_path(key or None, shard_index)
            # An earlier output is never written in place: locally its shard is linked, not copied.
            fs.copy_file(fs.join(earlier, info["path"]), fs.join(self.output_path, rel), link=True)
            files[key] = {**info, "path": rel}
        record = {**record, "shard": shard_index, "num_shards": num_shards, "inputs": inputs, "files": files}
        fs.atomic_write(self._commit_record_path(shard_index), json.dumps(record, sort_keys=True, indent=1))
        return True

    def _commit_record(self, shard_index: int) -> dict[str, Any] | None:
        try:
            record = json.loads(fs.read_bytes(self._commit_record_path(shard_index)))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None
        return record if isinstance(record, dict) else None

    def write_shard(self, ctx: WorkerContext, records: Iterator[Any], inputs: list[str]) -> dict[str, Any]:
        keys: list[str | None] = list(self.splits) if self.splits else [None]
        local_out = fs.is_local(self.output_path)
        scratch = None if local_out else _scratch_folder()
        tmp_paths: dict[str | None, str] = {}
        finals: dict[str | None, str] = {}
        for key in keys:
            rel = self.shard_path(key, ctx.shard_index)
            finals[key] = fs.join(self.output_path, rel)
            name = f"{_TMP_PREFIX}{uuid.uuid4().hex}-{os.path.basename(rel)}"
            if local_out:
                folder = os.path.dirname(os.path.abspath(fs.strip_protocol(finals[key])))
                os.makedirs(folder, exist_ok=True)
                tmp_paths[key] = os.path.join(folder, name)
            else:
                tmp_paths[key] = os.path.join(scratch, name)  # type: ignore[arg-type]
        stats = {key: {"records": 0, "tokens": 0} for key in keys}
        opened: dict[str | None, OpenFile] = {}
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
            extra = {key: opened.pop(key).close() for key in keys}
            files = {}
            for key in keys:
                files[key or ""] = {"path": self.shard_path(key, ctx.shard_index), **stats[key],
                                    "bytes": os.path.getsize(tmp_paths[key]),
                                    "sha256": fs.sha256_of(tmp_paths[key]), **extra[key]}
                _commit(tmp_paths[key], finals[key])
        finally:
            for handle in opened.values():
                handle.discard()
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

