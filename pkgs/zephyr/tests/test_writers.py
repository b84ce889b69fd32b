"""Writers: layout, index, atomic commit and resume, on local, memory:// and gs:// stores."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import grain.python as grain
import numpy as np
import pytest

from rigging import filesystem as fs
from rigging.tempdirs import ZEPHYR_SHARD, owned_prefix, owned_tempdir
from testsupport import zephyr_data as helpers
from testsupport.namespaces import gone_place
from zephyr import ArrayRecordSink, Dataset, JsonlSink, TokenShardReader, read_documents


def _token_dataset() -> Dataset:
    return Dataset.from_items([range(1, 8), range(8, 12)]).map(helpers.as_tokens)


def _expected(split: str) -> list[list[int]]:
    return [list(range(x)) for x in range(1, 12) if ("train" if x % 3 else "validation") == split]


def test_array_record_sink_layout_index_and_grain(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    sink = ArrayRecordSink(out, splits=("train", "validation"), metadata={"vocab_size": 99},
                           format_name="test/v1")
    result = _token_dataset().write(sink, max_parallel=2)
    index = json.loads((tmp_path / "out/index.json").read_text())
    assert index == result.index
    assert index["format"] == "test/v1" and index["vocab_size"] == 99
    for split in ("train", "validation"):
        info = index["splits"][split]
        assert [s["path"] for s in info["shards"]] == [f"{split}/part-00000.array_record",
                                                       f"{split}/part-00001.array_record"]
        expected = _expected(split)
        assert info["records"] == len(expected) and info["tokens"] == sum(map(len, expected))
        for shard in info["shards"]:
            data = (tmp_path / "out" / shard["path"]).read_bytes()
            assert shard["bytes"] == len(data) and shard["sha256"] == hashlib.sha256(data).hexdigest()
        source = grain.ArrayRecordDataSource([str(tmp_path / "out" / s["path"]) for s in info["shards"]])
        assert [np.frombuffer(source[i], "<u4").tolist() for i in range(len(source))] == expected
    assert not [n for n in os.listdir(tmp_path / "out/train") if n.startswith(".tmp-")]


def test_a_rerun_skips_committed_shards_and_redoes_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ArrayRecordSink(str(out), splits=("train", "validation"))
    first = _token_dataset().write(sink, max_parallel=2)
    assert first.written == (0, 1)
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*.array_record")}
    index_bytes = (out / "index.json").read_bytes()

    # Simulate a run killed inside shard 1: its commit record is gone (cut while being written),
    # temporary files are left.
    (out / ".commits/part-00001.json").unlink()
    (out / ".commits/.tmp-dead-part-00001.json").write_bytes(b'{"shard": ')
    (out / "train/.tmp-dead-part-00001.array_record").write_bytes(b"partial")
    (out / "validation/part-00001.array_record").write_bytes(b"half-written by a killed run")
    second = _token_dataset().write(sink, max_parallel=2)
    assert second.written == (1,) and second.reused == (0,)
    for path, stamp in before.items():
        if "part-00000" in path.name:
            assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp
    assert (out / "index.json").read_bytes() == index_bytes
    assert not (out / "train/.tmp-dead-part-00001.array_record").exists()
    assert not (out / ".commits/.tmp-dead-part-00001.json").exists()

    # A committed shard whose file was damaged afterwards (size differs) is redone too.
    with open(out / "train/part-00000.array_record", "ab") as f:
        f.write(b"junk")
    third = _token_dataset().write(sink, max_parallel=2)
    assert third.written == (0,)
    assert (out / "index.json").read_bytes() == index_bytes


def test_jsonl_sink_on_memory_round_trips(memory_prefix: str) -> None:
    out = fs.join(memory_prefix, "jsonl")
    ds = Dataset.from_items([["a", "b"], ["c"]])
    result = ds.write(JsonlSink(out))
    assert result.index["records"] == 3
    assert [s["path"] for s in result.index["shards"]] == ["part-00000.jsonl", "part-00001.jsonl"]
    assert list(read_documents(fs.join(out, "part-*.jsonl"))) == ["a", "b", "c"]
    assert json.loads(fs.read_text(fs.join(out, "index.json")))["format"] == "zephyr.jsonl/v1"
    assert ds.write(JsonlSink(out)).reused == (0, 1)


def test_array_record_sink_on_gcs_round_trips(gcs_bucket: str) -> None:
    out = fs.join(gcs_bucket, "tokens")
    # Scratch folders: one a killed writer left (its process is gone), one of a live process.
    left = Path(tempfile.gettempdir(), f"{owned_prefix(ZEPHYR_SHARD, gone_place())}killed")
    live = Path(owned_tempdir(ZEPHYR_SHARD))
    left.mkdir()
    (left / ".tmp-x-part-00000.array_record").write_bytes(b"partial")
    result = _token_dataset().write(ArrayRecordSink(out, splits=("train", "validation")), max_parallel=2)
    for split in ("train", "validation"):
        got = []
        for shard in result.index["splits"][split]["shards"]:
            with TokenShardReader(fs.join(out, shard["path"])) as reader:
                got.extend(r.tolist() for r in reader)
            assert hashlib.sha256(fs.read_bytes(fs.join(out, shard["path"]))).hexdigest() == shard["sha256"]
        assert got == _expected(split)
    assert _token_dataset().write(ArrayRecordSink(out, splits=("train", "validation"))).reused == (0, 1)
    assert not left.exists() and live.is_dir()
    live.rmdir()


def test_sink_configs_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split names must be plain folder names, got 'a/b'"):
        ArrayRecordSink(str(tmp_path), splits=("a/b",))
    with pytest.raises(ValueError, match="output_path must be a non-empty path"):
        JsonlSink("")
    with pytest.raises(ValueError, match=r"metadata may not set index keys \['splits'\]"):
        ArrayRecordSink(str(tmp_path), metadata={"splits": 1})


def test_records_for_an_unknown_split_fail_loudly(memory_prefix: str) -> None:
    from zephyr import ShardFailed

    ds = Dataset.from_items([[("test", [1])]])
    with pytest.raises(ShardFailed, match="record for unknown split 'test'"):
        ds.write(ArrayRecordSink(fs.join(memory_prefix, "x"), splits=("train",)))


def test_fewer_shards_on_a_rerun_remove_the_extra_parts(memory_prefix: str) -> None:
    out = fs.join(memory_prefix, "out")
    Dataset.from_items([["a"], ["b"], ["c"]]).write(JsonlSink(out))
    result = Dataset.from_items([["a", "b", "c"]]).write(JsonlSink(out))
    assert result.written == (0,)
    assert [n for n in fs.listdir(out) if n.startswith("part-")] == ["part-00000.jsonl"]
    assert fs.listdir(fs.join(out, ".commits")) == ["part-00000.json"]
