"""The shard folder format (zephyr.shards): the index, token records, local copies and the shard reader."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

from rigging import filesystem as fs
from testsupport import zephyr_data as helpers
from zephyr import (
    ArrayRecordSink,
    DataError,
    Dataset,
    TokenShardReader,
    local_shard,
    read_index,
    verify_shard_index,
)


def _token_dataset() -> Dataset:
    return Dataset.from_items([range(1, 8), range(8, 12)]).map(helpers.as_tokens)


def _write_shard(path: Path, docs: list[list[int]]) -> None:
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for ids in docs:
        writer.write(np.asarray(ids, "<u4").tobytes())
    writer.close()


def test_token_shard_reader_reads_records_and_names_a_truncated_file(tmp_path: Path) -> None:
    docs = [list(range(i, i + 50 + i % 7)) for i in range(2000)]
    good = tmp_path / "part-00000.array_record"
    _write_shard(good, docs)
    with TokenShardReader(str(good)) as reader:
        assert len(reader) == len(docs)
        assert [r.tolist() for r in reader][::97] == docs[::97]
    cut = tmp_path / "part-00001.array_record"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(DataError, match=r"part-00001\.array_record: truncated or corrupt ArrayRecord shard"):
        TokenShardReader(str(cut))


def test_token_shard_reader_copies_remote_shards(tmp_path: Path, memory_prefix: str) -> None:
    local = tmp_path / "s.array_record"
    _write_shard(local, [[1, 2, 3], [4]])
    remote = fs.join(memory_prefix, "s.array_record")
    fs.atomic_write(remote, local.read_bytes())
    with TokenShardReader(remote) as reader:
        assert [r.tolist() for r in reader] == [[1, 2, 3], [4]]


def test_verify_shard_index_catches_missing_truncated_and_altered_shards(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(DataError, match="no shard index"):
        verify_shard_index(str(out))
    sink = ArrayRecordSink(str(out), splits=("train", "validation"))
    index = _token_dataset().write(sink, max_parallel=2).index
    assert verify_shard_index(str(out)) == index
    shard = out / "train/part-00001.array_record"
    data = shard.read_bytes()
    shard.write_bytes(data[:-10])
    with pytest.raises(DataError, match=r"train/part-00001\.array_record: shard is \d+ bytes, index\.json says"):
        verify_shard_index(str(out))
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(DataError, match=r"part-00001\.array_record: shard content does not match its sha256"):
        verify_shard_index(str(out))
    shard.unlink()
    with pytest.raises(DataError, match=r"part-00001\.array_record: shard listed in index\.json is missing"):
        verify_shard_index(str(out))


def test_read_index_names_the_index_and_what_is_wrong(tmp_path: Path) -> None:
    index_path = tmp_path / "index.json"
    with pytest.raises(DataError, match=r"index\.json: no shard index"):
        read_index(str(tmp_path))
    index_path.write_text("{cut")
    with pytest.raises(DataError, match=r"index\.json: not valid JSON"):
        read_index(str(tmp_path))
    good = {"format": "f/v1", "vocab_size": 9,
            "splits": {"train": {"shards": [{"path": "train/p", "bytes": 1, "sha256": "ab"}]}}}
    index_path.write_text(json.dumps(good))
    assert read_index(str(tmp_path), format_name="f/v1", required=("vocab_size",)) == good
    with pytest.raises(DataError, match=r"format must be 'g/v1', got 'f/v1'"):
        read_index(str(tmp_path), format_name="g/v1")
    with pytest.raises(DataError, match=r"missing field 'eos_id'"):
        read_index(str(tmp_path), required=("vocab_size", "eos_id"))
    for bad in ({"path": "/abs", "bytes": 1, "sha256": "ab"}, {"path": "../up", "bytes": 1, "sha256": "ab"},
                {"path": "p", "bytes": "1", "sha256": "ab"}, {"path": "p", "bytes": 1}):
        index_path.write_text(json.dumps({"splits": {"train": {"shards": [bad]}}}))
        with pytest.raises(DataError, match=r"split 'train': shard 0 is not \{path \(relative\), bytes, sha256\}"):
            read_index(str(tmp_path))
    index_path.write_text(json.dumps({"splits": {}}))
    with pytest.raises(DataError, match="'splits' must be a non-empty object"):
        read_index(str(tmp_path))


def test_index_written_by_a_sink_reads_back_and_verifies_on_every_store(store_url: str) -> None:
    out = fs.join(store_url, "tokens")
    index = _token_dataset().write(ArrayRecordSink(out, splits=("train", "validation")), in_process=True).index
    assert read_index(out) == verify_shard_index(out) == index
    for shard in index["splits"]["train"]["shards"]:
        assert fs.sha256_of(fs.join(out, shard["path"])) == shard["sha256"]


def test_local_shard_copies_a_remote_shard_once_and_checks_its_digest(tmp_path: Path, memory_prefix: str) -> None:
    data = b"shard bytes" * 1000
    remote = fs.join(memory_prefix, "train", "part-00000.array_record")
    fs.atomic_write(remote, data)
    digest = hashlib.sha256(data).hexdigest()
    cache = str(tmp_path / "cache")
    copy = local_shard(remote, digest, cache)
    assert Path(copy).read_bytes() == data and copy.startswith(cache)
    fs.delete(remote)
    assert local_shard(remote, digest, cache) == copy  # the cached copy, keyed by content
    local = tmp_path / "here.array_record"
    local.write_bytes(data)
    assert local_shard(str(local), "not checked locally") == str(local)
    fs.atomic_write(remote, data + b"changed")
    with pytest.raises(DataError, match=r"part-00000\.array_record: copied shard has sha256 [0-9a-f]+, index\.json says 0+"):
        local_shard(remote, "0" * 64, cache)
    assert sorted(p.name for p in Path(cache).iterdir()) == [Path(copy).name]  # no temporary left
    with pytest.raises(DataError, match=r"nothing\.array_record: file not found"):
        local_shard(fs.join(memory_prefix, "nothing.array_record"), "1" * 64, cache)
