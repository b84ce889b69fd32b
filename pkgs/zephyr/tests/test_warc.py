"""Web archives read as they stream: WARC responses and WET conversions, gzip per record, over the
whole file or none, on any fsspec URL; cut, corrupt and odd records come with their problem named,
and a corrupt gzip member costs only the records inside it."""

from __future__ import annotations

import gzip

import pytest

from rigging import filesystem as fs
from zephyr import (
    DataError,
    FileSlice,
    WebRecord,
    read_documents,
    read_web_records,
    reader_for_path,
    write_web_archive,
)

_DATE = "2026-03-04T05:06:07Z"


def _page(i: int, **kw) -> WebRecord:
    fields = {"id": f"<urn:uuid:00000000-0000-0000-0000-{i:012d}>", "url": f"https://example.org/p{i}", "date": _DATE,
              "content_type": "text/html", "charset": "utf-8",
              "payload": f"<html><body><p>Page {i}: caf\u00e9</p></body></html>".encode()}
    return WebRecord(**{**fields, **kw})


def _read(path: str) -> list[tuple[str, str | None, str | None]]:
    return [(r.id[-5:-1], r.problem, r.content_type) for r in read_web_records(path)]


@pytest.mark.parametrize("layout", ["per-record", "whole-file", "plain"])
def test_responses_round_trip_with_url_date_type_and_charset(tmp_path, layout: str) -> None:
    pages = [_page(i) for i in range(3)] + [_page(3, content_type="image/png", charset=None, payload=b"\x89PNG\r\n")]
    path = str(tmp_path / ("crawl.warc" if layout == "plain" else "crawl.warc.gz"))
    write_web_archive(path, pages, gzip=layout == "per-record")
    if layout == "whole-file":
        fs.atomic_write(path, gzip.compress(fs.read_bytes(str(tmp_path / "crawl.warc.gz"))))
        write_web_archive(str(tmp_path / "plain.warc"), pages, gzip=False)
        fs.atomic_write(path, gzip.compress(fs.read_bytes(str(tmp_path / "plain.warc"))))
    assert list(read_web_records(path)) == pages


def test_on_an_object_store_url() -> None:
    path = "memory://zephyr-warc-test/cc/part.warc.gz"
    write_web_archive(path, [_page(1), _page(2)])
    try:
        assert [r.url for r in read_web_records(path)] == ["https://example.org/p1", "https://example.org/p2"]
    finally:
        fs.rm_tree("memory://zephyr-warc-test")


def test_cut_and_marked_records_are_truncated(tmp_path) -> None:
    path = str(tmp_path / "cut.warc.gz")
    write_web_archive(path, [_page(0), _page(1, problem="truncated")])
    assert _read(path) == [("0000", None, "text/html"), ("0001", "truncated", "text/html")]
    plain = str(tmp_path / "cut.warc")
    write_web_archive(plain, [_page(0), _page(1)], gzip=False)
    fs.atomic_write(plain, fs.read_bytes(plain)[:-30])  # the file ends inside the last record
    records = list(read_web_records(plain))
    assert [r.problem for r in records] == [None, "truncated"] and "the file ends inside it" in records[1].detail


def test_a_corrupt_gzip_member_loses_only_its_records(tmp_path) -> None:
    path = str(tmp_path / "bad.warc.gz")
    write_web_archive(path, [_page(i) for i in range(6)])
    raw = bytearray(fs.read_bytes(path))
    starts = [i for i in range(len(raw)) if raw[i:i + 3] == b"\x1f\x8b\x08"]
    for k in (1, 4):
        for j in range(starts[k] + 12, starts[k] + 40):
            raw[j] ^= 0x5A
    fs.atomic_write(path, bytes(raw))
    got = list(read_web_records(path))
    assert [(r.id[-5:-1] if r.problem is None else r.problem) for r in got] == ["0000", "bad_gzip", "0002", "0003",
                                                                              "bad_gzip", "0005"]
    assert got[1].id.endswith("after record <urn:uuid:00000000-0000-0000-0000-000000000000>")
    assert "reading on from the next gzip member" in got[1].detail


def test_wet_texts_are_documents(tmp_path) -> None:
    path = str(tmp_path / "CC-MAIN-x.warc.wet.gz")
    texts = ["First page.\nIts second line.", "Zweite Seite, mit Umlauten: \u00e4\u00f6\u00fc."]
    write_web_archive(path, [_page(i, content_type="text/plain", payload=t.encode()) for i, t in enumerate(texts)])
    assert list(read_documents(path)) == texts
    reader = reader_for_path(path, record_fn=lambda r: (r["url"], r["date"], r["text"]))
    assert list(reader.read(FileSlice(path))) == [(f"https://example.org/p{i}", _DATE, t) for i, t in enumerate(texts)]
    warc = str(tmp_path / "pages.warc.gz")
    write_web_archive(warc, [_page(0)])
    with pytest.raises(DataError, match="a WARC file holds pages, not documents"):
        list(read_documents(warc))
