"""A step's records page by page: JSON lines and Parquet rows as they are, token shards decoded back
to text with the tokenizer the step saved beside them, attribute sidecars beside the documents they
describe."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import Any

from marin.report.browse.store_view import TOKEN_SUFFIXES, BrowseError, StepView, check_relative
from zephyr import DataError, FileSlice, reader_for_path

__all__ = ["PAGE_MAX", "TEXT_MAX", "first_record", "iter_records", "page_of", "shown_text"]

PAGE_MAX = 200
"""The most records one page holds."""
TEXT_MAX = 20_000
"""Characters of a text shown (the rest is counted, not sent)."""
TOKENIZER_FILE = "tokenizer.json"


def _whole(record: dict[str, Any]) -> dict[str, Any]:
    return record


def iter_records(path: str) -> Iterator[dict[str, Any]]:
    """Every record (JSON object, Parquet row) of a JSON-lines or Parquet file, in order."""
    yield from reader_for_path(path, record_fn=_whole).read(FileSlice(path))


def first_record(path: str) -> dict[str, Any] | None:
    """The first record of a JSON-lines or Parquet file, or None when it has none or is not one."""
    try:
        return next(iter_records(path), None)
    except DataError:
        return None


def shown_text(text: str, limit: int = TEXT_MAX) -> dict[str, Any]:
    """A text as a page shows it: at most ``limit`` characters, and how many it has."""
    return {"text": text[:limit], "chars": len(text), "cut": len(text) > limit}


def _shown(record: dict[str, Any], index: int) -> dict[str, Any]:
    """One record on a page: its id and text apart, every other field as it is."""
    out: dict[str, Any] = {"index": index, "id": record.get("id")}
    text = record.get("text")
    if isinstance(text, str):
        out.update(shown_text(text))
    out["fields"] = {k: v for k, v in record.items() if k not in ("id", "text")}
    return out


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str) -> Any:
    # Imported here: only pages of tokenized steps need the tokenizers library.
    from tokenizers import Tokenizer

    from rigging import filesystem as fs

    return Tokenizer.from_str(fs.read_text(path))


def _selected(step: StepView, chosen: str) -> list[str]:
    """The step's data files ``chosen`` names: one file, the files below a folder, or (empty) all."""
    files = step.data_files()
    if chosen in files:
        return [chosen]
    if chosen:
        check_relative(chosen, "file")
        below = [f for f in files if f.startswith(chosen.strip("/") + "/")]
        if not below:
            raise BrowseError(404, f"{step.output_name} has no file of records {chosen!r}")
        return below
    return files


def _token_page(step: StepView, files: list[str], start: int, per: int) -> tuple[list[dict[str, Any]], int]:
    """Records ``[start, start + per)`` of token shards, decoded with the step's ``tokenizer.json``;
    and how many records the shards hold."""
    # Imported here: array_record is needed by token shards alone.
    from zephyr.shards import TokenShardReader

    if TOKENIZER_FILE not in step.listed:
        raise BrowseError(404, f"{step.output_name} has no {TOKENIZER_FILE} to decode its tokens with")
    tokenizer = _tokenizer(step.path_of(TOKENIZER_FILE))
    rows, seen = [], 0
    for rel in files:
        with TokenShardReader(step.path_of(rel)) as shard:
            for k in range(max(0, start - seen), min(len(shard), start + per - seen)):
                ids = [int(t) for t in shard[k]]
                rows.append({"index": seen + k, "file": rel, "line": k, "tokens": len(ids), "fields": {"first_ids": ids[:16]},
                             **shown_text(tokenizer.decode(ids, skip_special_tokens=False))})
            seen += len(shard)
    return rows, seen


def _record_page(files: list[tuple[str, str]], start: int, per: int) -> tuple[list[dict[str, Any]], bool]:
    """Records ``[start, start + per)`` of JSON-lines or Parquet files read one after the other
    (``(name, path)`` each); and whether more follow."""
    def numbered() -> Iterator[tuple[str, int, dict[str, Any]]]:
        for rel, path in files:
            for line, record in enumerate(iter_records(path)):
                yield rel, line, record

    rows = list(itertools.islice(numbered(), start, start + per + 1))
    return [{**_shown(r, start + k), "file": rel, "line": line} for k, (rel, line, r) in enumerate(rows[:per])], len(rows) > per


def _add_documents(step: StepView, rows: list[dict[str, Any]]) -> bool:
    """For an attribute step's sidecar records, the text of the document each describes (the same
    line of the shard of the same name in the step's input); False when there is no input to read."""
    found = step.input_of("input") if step.kind == "attributes" else None
    if found is None:
        return False
    upstream, below = found
    for rel in sorted({r["file"] for r in rows}):
        name = f"{below}/{rel}" if below else rel
        if name not in upstream.listed:
            continue
        lines = [r["line"] for r in rows if r["file"] == rel]
        wanted = dict(itertools.islice(enumerate(iter_records(upstream.path_of(name))), min(lines), max(lines) + 1))
        for row in (r for r in rows if r["file"] == rel):
            doc = wanted.get(row["line"]) or {}
            if doc.get("id") == row["id"] and isinstance(doc.get("text"), str):
                row.update(shown_text(doc["text"]))
    return True


def page_of(step: StepView, chosen: str = "", page: int = 0, per: int = 20) -> dict[str, Any]:
    """Page ``page`` (from 0) of ``per`` records of the step's data files ``chosen`` names (a file,
    a folder, or empty for all), read in order.

    Raises:
        BrowseError: a file the step does not have, or a page out of bounds.
    """
    if page < 0 or not 0 < per <= PAGE_MAX:
        raise BrowseError(400, f"page must be >= 0 and per between 1 and {PAGE_MAX}, got page={page}, per={per}")
    files = _selected(step, chosen)
    tokens = [f for f in files if f.endswith(TOKEN_SUFFIXES)]
    start, total, documents = page * per, None, False
    if tokens:
        rows, total = _token_page(step, tokens, start, per)
        more = start + per < total
    else:
        rows, more = _record_page([(f, step.path_of(f)) for f in files], start, per)
        documents = _add_documents(step, rows)
    return {"files": files, "page": page, "per": per, "total": total, "more": more, "records": rows, "documents": documents}
