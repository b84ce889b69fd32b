"""The data-curation file formats: document shards, attribute sidecars and step summaries.

Layout of every document or attribute step's output folder::

    <out>/<shard name>        JSON lines (``.jsonl``, ``.jsonl.gz`` or ``.jsonl.zst``), one per shard
    <out>/_summary.json       counts and explanations (the leading ``_`` keeps folder readers,
                              such as ``tokenized(source=<out>)``, from taking it for data)

Documents are records with at least ``id`` (a string or an integer) and ``text`` (a string). An
attribute step writes, for every input shard, a sidecar with the **same name** holding one
``{"id": ..., "attributes": {...}}`` per document in the same order, so readers walk documents and
sidecars in lockstep (:func:`iter_lockstep`), which checks that the ids agree.

A shard's name is its path relative to the input: below the folder given, below the fixed part
of a glob (the folders before the first ``*?[``), the file name of a single file, or below the
snapshot of a Hugging Face dataset id (resolved from the hub cache). Shards are
ordered as :func:`zephyr.expand_paths` lists them; the corpus's total order is (shard, line).

Files are written whole (``rigging.filesystem.atomic_write``) with keys sorted, so the same records
give the same bytes; gzip members carry no timestamp.
"""

from __future__ import annotations

import gzip
import json
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.core.sources import Source
from marin.experiment.data.sources import is_hf_id, resolve_source
from rigging import filesystem as fs
from zephyr import Compression, DataError, FileSlice, JsonlReader, expand_paths

__all__ = [
    "DOCUMENT_SUFFIXES",
    "SUMMARY_FILE",
    "Shard",
    "attribute_record",
    "encode_jsonl",
    "iter_corpus",
    "iter_lockstep",
    "list_files",
    "list_shards",
    "read_documents",
    "read_records",
    "read_sidecar",
    "read_summary",
    "write_jsonl",
    "write_sidecar",
    "write_summary",
]

SUMMARY_FILE = "_summary.json"
DOCUMENT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd")
_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Shard:
    """One input file and the name its outputs take.

    Attributes:
        path: the file's URL.
        name: its path relative to the input (the name of the sidecar or output shard).
    """

    path: str
    name: str


def _base_of(entry: str) -> str:
    """The folder that names below ``entry`` are relative to."""
    cut = min((i for i, c in enumerate(entry) if c in _GLOB_CHARS), default=-1)
    if cut >= 0:
        return entry[:cut].rsplit("/", 1)[0] if "/" in entry[:cut] else ""
    if fs.exists(entry) and not fs.file_exists(entry):
        return entry.rstrip("/")
    return entry.rsplit("/", 1)[0] if "/" in entry else ""


def _relative(path: str, base: str) -> str:
    if not base:  # a bare file name or pattern: names are the relative paths themselves
        return posixpath.normpath(path)
    prefix = base.rstrip("/") + "/"
    if path.startswith(prefix):
        return path[len(prefix):]
    # fsspec may spell a local path differently ("./a" against "a"): compare normalised paths.
    p, b = posixpath.normpath(fs.strip_protocol(path)), posixpath.normpath(fs.strip_protocol(base))
    if p.startswith(b.rstrip("/") + "/"):
        return p[len(b.rstrip("/")) + 1:]
    raise ValueError(f"{path} is not below {base}")


def _hub_files(repo_id: str, suffixes: Sequence[str]) -> list[Shard]:
    """The train files of a Hugging Face dataset in the hub cache, named below its snapshot folder."""
    files = resolve_source(repo_id)
    paths = [files] if isinstance(files, str) else list(files)
    base = posixpath.commonpath([posixpath.dirname(p) for p in paths]) if paths else ""
    matched = [Shard(p, posixpath.relpath(p, base)) for p in paths if p.lower().endswith(tuple(x.lower() for x in suffixes))]
    if not matched:
        found = sorted({posixpath.basename(p).split(".", 1)[-1] for p in paths})
        raise DataError(repo_id, "", f"the Hugging Face dataset's train files are {', '.join(found)}; this step "
                                     f"reads files ending in {', '.join(suffixes)}")
    return matched


def source_entries(source: Any) -> list[str]:
    """The paths, globs, folders or Hugging Face ids ``source`` names (one, a source marker, or a
    list of them), as strings.

    Raises:
        ValueError: ``source`` is none of those.
    """
    if isinstance(source, Source | str):
        source = [source]  # a config read before its step runs holds the marker (a run hands fn the spec)
    entries = [e.spec if isinstance(e, Source) else e for e in source]
    if not entries or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"source must be a path, glob or folder (or a list of them), got {source!r}")
    return entries


def list_files(source: Any, suffixes: Sequence[str]) -> list[Shard]:
    """The files of ``source`` (a path, folder, glob, a Hugging Face dataset id, or a list of them)
    whose names end in ``suffixes``.

    A Hugging Face id (``owner/name`` that is no local path) resolves to its train files in the
    hub cache (:func:`marin.experiment.data.sources.resolve_source`), named below the snapshot.

    Raises:
        DataError: an entry names nothing, or holds no file with one of ``suffixes``.
        DataSourceError: a Hugging Face id is not in the hub cache (and cannot be downloaded).
        ValueError: two files of the source would get the same name.
    """
    entries = source_entries(source)
    shards: list[Shard] = []
    lowered = tuple(s.lower() for s in suffixes)
    for entry in entries:
        if is_hf_id(entry):
            shards.extend(_hub_files(entry, suffixes))
            continue
        base = _base_of(entry)
        matched = [Shard(p, _relative(p, base)) for p in expand_paths(entry) if p.lower().endswith(lowered)]
        if not matched:
            raise DataError(entry, "", f"no files ending in {', '.join(suffixes)}")
        shards.extend(matched)
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two input files would share the output name {twice[0]!r}; give one folder per source")
    return shards


def list_shards(source: Any) -> list[Shard]:
    """The document (or sidecar) shards of ``source``: its JSON-lines files."""
    return list_files(source, DOCUMENT_SUFFIXES)


def _object(record: dict[str, Any]) -> dict[str, Any]:
    return record


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """Every JSON object of a JSON-lines file (errors name the file and line)."""
    yield from JsonlReader(record_fn=_object).read(FileSlice(path))


def _document(record: dict[str, Any]) -> dict[str, Any]:
    doc_id = record.get("id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise ValueError(f"a document needs an 'id' (string or integer), got {doc_id!r}")
    if not isinstance(record.get("text"), str):
        raise ValueError(f"document {doc_id!r} needs a string 'text', got {type(record.get('text')).__name__}")
    return record


def read_documents(path: str) -> Iterator[dict[str, Any]]:
    """The documents of one shard, checked to have an ``id`` and a string ``text``."""
    yield from JsonlReader(record_fn=_document).read(FileSlice(path))


def iter_corpus(shards: Sequence[Shard]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(shard index, document)`` for every document of ``shards``, in the corpus's total order."""
    for index, shard in enumerate(shards):
        for doc in read_documents(shard.path):
            yield index, doc


def attribute_record(doc_id: Any, attributes: dict[str, Any]) -> dict[str, Any]:
    """One sidecar line."""
    return {"id": doc_id, "attributes": attributes}


def encode_jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    """JSON lines with sorted keys (the same records always give the same bytes)."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode("utf-8")


def write_jsonl(path: str, records: Iterable[dict[str, Any]]) -> int:
    """Write ``records`` to ``path`` whole, compressed as its name says; returns the record count."""
    rows = list(records)
    payload = encode_jsonl(rows)
    compression = Compression.of(path)
    if compression is Compression.GZIP:
        payload = gzip.compress(payload, mtime=0)
    elif compression is Compression.ZSTD:
        import zstandard  # only for .zst outputs

        payload = zstandard.ZstdCompressor().compress(payload)
    fs.atomic_write(path, payload)
    return len(rows)


def write_sidecar(output_path: str, shard: Shard, ids: Sequence[Any], attributes: Sequence[dict[str, Any]]) -> int:
    """Write the sidecar of ``shard`` (same name) under ``output_path``: one record per document."""
    if len(ids) != len(attributes):
        raise ValueError(f"{shard.name}: {len(ids)} documents but {len(attributes)} attribute records")
    return write_jsonl(fs.join(output_path, shard.name), map(attribute_record, ids, attributes))


def read_sidecar(folder: str, shard: Shard) -> Iterator[dict[str, Any]]:
    """The attribute records of ``shard`` in the sidecar folder ``folder``.

    Raises:
        DataError: the folder has no sidecar of that name, or a line is not an attribute record.
    """
    path = fs.join(folder, shard.name)
    if not fs.exists(path):
        raise DataError(path, "", f"no attribute sidecar for the document shard {shard.name!r}; "
                                  "was it made from these documents?")
    for number, record in enumerate(read_records(path), 1):
        if "id" not in record or not isinstance(record.get("attributes"), dict):
            raise DataError(path, f"line {number}", "expected {\"id\": ..., \"attributes\": {...}}")
        yield record


def iter_lockstep(shard: Shard, sidecar_folders: Sequence[str]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """``(document, [attributes of each sidecar folder])`` for every document of ``shard``.

    Raises:
        DataError: a sidecar's id differs from the document's at the same line, or a sidecar
            has more or fewer lines than the shard (naming the sidecar file and line).
    """
    sidecars = [read_sidecar(folder, shard) for folder in sidecar_folders]
    line = 0
    for doc in read_documents(shard.path):
        line += 1
        found = []
        for folder, sidecar in zip(sidecar_folders, sidecars, strict=True):
            record = next(sidecar, None)
            where = fs.join(folder, shard.name)
            if record is None:
                raise DataError(where, f"line {line}", f"sidecar ends before the documents (document id {doc['id']!r})")
            if record["id"] != doc["id"]:
                raise DataError(where, f"line {line}",
                                f"id {record['id']!r} does not match the document's id {doc['id']!r} in {shard.path}")
            found.append(record["attributes"])
        yield doc, found
    for folder, sidecar in zip(sidecar_folders, sidecars, strict=True):
        if next(sidecar, None) is not None:
            raise DataError(fs.join(folder, shard.name), f"line {line + 1}",
                            f"sidecar has more lines than the {line} documents of {shard.path}")


def write_summary(output_path: str, summary: dict[str, Any]) -> None:
    """Write a step's summary (``_summary.json``); written last, after every shard."""
    fs.atomic_write(fs.join(output_path, SUMMARY_FILE), json.dumps(summary, indent=1, sort_keys=True) + "\n")


def read_summary(output_path: str) -> dict[str, Any]:
    """A step's summary, as :func:`write_summary` wrote it."""
    return json.loads(fs.read_bytes(fs.join(output_path, SUMMARY_FILE)))
