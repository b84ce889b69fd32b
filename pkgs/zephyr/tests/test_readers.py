"""Readers: every format, compressed or not, on local and memory:// paths; bad input is loud."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from rigging import filesystem as fs
from zephyr import (
    Counters,
    DataError,
    FileSlice,
    JsonlReader,
    ParquetReader,
    TextReader,
    WorkerContext,
    expand_paths,
    plan_file_shards,
    read_documents,
    reader_for_path,
)

DOCS = ["The cat sat.", "A dog ran fast!", "Ünïcödé wörks 🙂", "last one"]


def _compress(data: bytes, compression: str) -> bytes:
    if compression == ".gz":
        return gzip.compress(data, mtime=0)
    if compression == ".zst":
        return zstandard.ZstdCompressor().compress(data)
    return data


def _write_format(folder: Path, fmt: str, compression: str, docs: list[str], field: str = "text") -> str:
    if fmt == "txt":
        data = ("\n".join(docs) + "\n").encode()
        name = "docs.txt"
    elif fmt == "paragraphs":
        data = "\n\n".join(d.replace(" ", "\n", 1) for d in docs).encode()
        name = "docs.txt"
    elif fmt == "jsonl":
        data = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()
        name = "docs.jsonl"
    else:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({field: docs}), sink)
        data = sink.getvalue().to_pybytes()
        name = "docs.parquet"
    path = folder / (name + compression)
    path.write_bytes(_compress(data, compression))
    return str(path)


@pytest.mark.parametrize("compression", ["", ".gz", ".zst"])
@pytest.mark.parametrize("fmt", ["txt", "paragraphs", "jsonl", "parquet"])
def test_every_format_and_compression_reads_the_documents(tmp_path: Path, fmt: str, compression: str) -> None:
    path = _write_format(tmp_path, fmt, compression, DOCS, field="body")
    mode = "paragraphs" if fmt == "paragraphs" else "lines"
    got = list(read_documents(path, text_field="body", text_mode=mode))
    expected = [d.replace(" ", "\n", 1) for d in DOCS] if fmt == "paragraphs" else DOCS
    assert got == expected


def test_reader_is_chosen_by_extension_under_compression() -> None:
    assert isinstance(reader_for_path("a/b.jsonl.gz"), JsonlReader)
    assert isinstance(reader_for_path("a/b.parquet.zst"), ParquetReader)
    assert isinstance(reader_for_path("a/b.txt.zstd"), TextReader)
    assert isinstance(reader_for_path("a/b.md"), TextReader)


def test_globs_and_folders_expand_in_sorted_order_without_hidden_files(tmp_path: Path) -> None:
    for name in ["b.txt", "a.txt", "sub/c.txt", ".tmp-x-a.txt", "_SUCCESS", ".commits/part.json"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name + "\n")
    assert expand_paths(str(tmp_path)) == [str(tmp_path / n) for n in ["a.txt", "b.txt", "sub/c.txt"]]
    assert expand_paths(str(tmp_path / "*.txt")) == [str(tmp_path / n) for n in ["a.txt", "b.txt"]]
    both = expand_paths([str(tmp_path / "b.txt"), str(tmp_path / "sub")])
    assert both == [str(tmp_path / "b.txt"), str(tmp_path / "sub/c.txt")]
    assert list(read_documents(str(tmp_path / "*.txt"))) == ["a.txt", "b.txt"]


def test_memory_paths_read_like_local_ones(memory_prefix: str) -> None:
    fs.atomic_write(fs.join(memory_prefix, "in/x.jsonl.gz"),
                    gzip.compress(b'{"text": "one"}\n{"text": "two"}\n'))
    fs.atomic_write(fs.join(memory_prefix, "in/y.txt"), b"three\n")
    assert list(read_documents(fs.join(memory_prefix, "in"))) == ["one", "two", "three"]
    assert list(read_documents(fs.join(memory_prefix, "in/*.txt"))) == ["three"]


@pytest.mark.parametrize("num_shards", [2, 3, 7, 40])
@pytest.mark.parametrize("ending", ["\n", ""])
def test_byte_range_shards_cover_every_line_exactly_once(tmp_path: Path, num_shards: int, ending: str) -> None:
    lines = [f"line {i} " + "x" * (i % 13) for i in range(57)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines[:20]))
    (tmp_path / "b.txt").write_text("\n".join(lines[20:]) + ending)
    files = expand_paths(str(tmp_path))
    readers = [reader_for_path(f) for f in files]
    shards = plan_file_shards(files, readers, num_shards)
    assert len(shards) == num_shards
    got = []
    for i, shard in enumerate(shards):
        got.extend(shard.records(WorkerContext(shard_index=i, num_shards=num_shards)))
    assert got == lines


def test_missing_inputs_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.txt: file not found"):
        expand_paths(str(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match=r"\*\.jsonl: no files match"):
        expand_paths(str(tmp_path / "*.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="folder holds no data files"):
        expand_paths(str(tmp_path / "empty"))
    with pytest.raises(DataError, match="no input paths"):
        expand_paths([])


def test_corrupt_gzip_names_file_and_line(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(f"doc {i}" for i in range(5000)) + "\n").encode())
    truncated = tmp_path / "cut.txt.gz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut\.txt\.gz: line \d+: corrupt gzip stream") as info:
        list(read_documents(str(truncated)))
    assert "\n" not in str(info.value)
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(b"this is not gzip at all")
    with pytest.raises(DataError, match=r"garbage\.jsonl\.gz: line 1: corrupt gzip stream"):
        list(read_documents(str(garbage)))


def test_corrupt_zstd_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt.zst"
    bad.write_bytes(b"\x28\xb5\x2f\xfd" + b"\xff" * 64)
    with pytest.raises(DataError, match=r"bad\.txt\.zst: line 1: corrupt zstd stream"):
        list(read_documents(str(bad)))


def test_non_utf8_names_file_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9 au lait\nend\n")
    with pytest.raises(DataError, match=r"latin\.txt: line 3: not valid UTF-8 \(byte 0xe9 at column 4\)"):
        list(read_documents(str(path)))


def test_non_utf8_inside_a_byte_range_reports_the_file_line_number(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    lines = [f"line number {i}".encode() for i in range(100)]
    lines[77] = b"bad \xff byte"
    path.write_bytes(b"\n".join(lines) + b"\n")
    reader = TextReader()
    size = os.path.getsize(path)
    piece = FileSlice(str(path), size // 2, None)
    with pytest.raises(DataError, match=r"big\.txt: line 78: not valid UTF-8"):
        list(reader.read(piece))


def test_jsonl_without_the_text_field_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "a"}\n\n{"body": "b", "id": 2}\n')
    with pytest.raises(DataError, match=r"docs\.jsonl: line 3: no 'text' field \(fields: body, id\)"):
        list(read_documents(str(path)))
    path.write_text('{"text": "a"}\n{"text": 5}\n')
    with pytest.raises(DataError, match=r"line 2: field 'text' is int, not a string"):
        list(read_documents(str(path)))
    path.write_text('{"text": "a"}\n{"text": "b"\n')
    with pytest.raises(DataError, match=r"line 2: invalid JSON"):
        list(read_documents(str(path)))


def test_a_lone_surrogate_from_a_json_escape_is_shown_escaped_in_the_error_and_the_log(tmp_path: Path, caplog) -> None:
    # A damaged file's JSON may decode to keys holding lone surrogates ("\\ud800"); a message holding
    # one cannot be written as UTF-8 (a log file, a terminal, pytest-xdist's report crashed on it).
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "a"}\n{"\\ud800x": 1}\n')
    with pytest.raises(DataError) as info:
        list(read_documents(str(path)))
    message = str(info.value)
    assert message.encode("utf-8").decode("utf-8") == message
    assert "line 2: no 'text' field (fields: \\ud800x)" in message
    counters = Counters()
    with caplog.at_level("WARNING"):
        assert list(read_documents(str(path), on_error="skip", counters=counters)) == ["a"]
    assert counters.get("skipped_records") == 1
    logged = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert logged and all("\\ud800x" in m and m.encode("utf-8") for m in logged)


def test_a_document_holding_a_lone_surrogate_is_a_bad_record_not_a_tokenizer_crash(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "caf\\u00e9"}\n{"text": "ab\\udc80c"}\n{"text": "ok"}\n')
    with pytest.raises(DataError, match=r"docs\.jsonl: line 2: field 'text' is not valid Unicode \(a lone surrogate at character 2\)"):
        list(read_documents(str(path)))
    counters = Counters()
    assert list(read_documents(str(path), on_error="skip", counters=counters)) == ["caf\u00e9", "ok"]
    assert counters.get("skipped_records") == 1


def test_parquet_problems_name_file_and_record(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["a", "b"]}), path)
    with pytest.raises(DataError, match=r"t\.parquet: no 'text' column \(columns: body\)"):
        list(read_documents(str(path)))
    pq.write_table(pa.table({"text": ["a", None, "c"]}), path)
    with pytest.raises(DataError, match=r"t\.parquet: record 1: column 'text' is null"):
        list(read_documents(str(path)))
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"t\.parquet: not a readable parquet file"):
        list(read_documents(str(path)))


def test_skip_mode_counts_every_bad_record(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "ok1"}\n{"nope": 1}\nnot json\n{"text": "ok2"}\n')
    (tmp_path / "b.txt").write_bytes(b"ok3\n\xff\xfe\nok4\n")
    data = gzip.compress(("\n".join(f"g{i}" for i in range(3000)) + "\n").encode())
    (tmp_path / "c.txt.gz").write_bytes(data[: len(data) // 2])
    pq.write_table(pa.table({"text": ["p1", None]}), tmp_path / "d.parquet")
    counters = Counters()
    docs = list(read_documents(str(tmp_path), on_error="skip", counters=counters))
    assert docs[:4] == ["ok1", "ok2", "ok3", "ok4"]
    assert docs[-1] == "p1"
    assert 0 < len(docs) - 5 < 3000  # the readable head of the cut gzip file
    assert counters == {"skipped_records": 4, "skipped_files": 1}


def test_on_error_is_validated() -> None:
    with pytest.raises(ValueError, match="on_error must be one of 'raise', 'skip', got 'ignore'"):
        JsonlReader(on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size must be > 0, got 0"):
        ParquetReader(batch_size=0)


def test_unreachable_sources_name_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # No network here: an hf:// source must fail with one clear error, not a library traceback.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"hf://datasets/nobody/nothing: .*offline, point at a local copy"):
        expand_paths("hf://datasets/nobody/nothing")
    with pytest.raises(DataError, match=r"nosuchproto://x: cannot be listed"):
        expand_paths("nosuchproto://x")
