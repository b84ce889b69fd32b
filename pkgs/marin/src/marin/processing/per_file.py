"""Map-style data steps made file by file: each input file's outputs are a *part* of the step's
output, named from the input file's name alone, so that a later build over a changed file set
copies the parts of unchanged files from an earlier build and processes only the others.

A step lists its inputs with their fingerprints (:func:`input_files`), and hands
:func:`map_files` a function that processes one of them (writing its output files, returning
their names and a few JSON-ready counts). :func:`map_files` writes the index of the parts
(``_parts.json``: each input file's name, fingerprint, output files and counts, in input order),
from which the step's summary is recomputed whichever way each part was made::

    files = input_files(config.input, DOCUMENT_SUFFIXES)
    parts = map_files(files, output_path, lambda f: PartOutput((f.name,), {"documents": work(f)}))
    write_summary(output_path, {"documents": sum(p.stats["documents"] for p in parts)})

Whether an earlier build's parts may be reused is the plan's decision
(:class:`marin.processing.incremental.IncrementalStart`), handed to the running step as
``current_step().start.reuse_parts``: a part is copied from there when its input file's
fingerprint equals the one its index records; everything else is processed. Which parts were
reused is reported to the build's provenance (``incremental``), never written in the output, so
the output is byte-identical to a build from scratch.

Fingerprints are those the plan used (:func:`marin.execution.store.sources.fingerprint_source`:
a local file's SHA-256, remembered by the stat cache; an object's listing checksum), except that
an object's MD5 is kept without its generation: a part copied inside a bucket is a new object with
the same bytes, and a step reading it should reuse what it made of it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marin.execution.run.worker import current_step
from marin.execution.store.listings import in_parallel
from marin.experiment.data.sources import is_hf_id
from marin.processing.attributes import list_files, source_entries
from marin.processing.incremental import PARTS_FILE
from rigging import filesystem as fs

__all__ = ["PARTS_FILE", "InputFile", "Part", "PartOutput", "content_fingerprint", "input_files", "map_files",
           "read_parts", "write_parts"]

_FORMAT = 1

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputFile:
    """One input file of a map-style step."""

    name: str
    """Its path relative to the input (:class:`marin.processing.attributes.Shard`): what its outputs are named from."""
    path: str
    """Its URL."""
    fingerprint: str | None
    """Its content fingerprint (:func:`content_fingerprint`); None where there is none (a Hugging
    Face dataset's file): such a file is always processed."""


@dataclass(frozen=True)
class PartOutput:
    """What processing one input file made."""

    files: tuple[str, ...]
    """The files it wrote, relative to the output folder, named from the input file's name alone
    (never its position among the inputs), so a later build would write the same names."""
    stats: Mapping[str, Any] = field(default_factory=dict)
    """JSON-ready counts of the part, kept in the index: a summary is recomputed from them."""

    def __post_init__(self) -> None:
        files = (self.files,) if isinstance(self.files, str) else tuple(self.files)
        for name in files:
            norm = posixpath.normpath(name) if isinstance(name, str) and name else ""
            if norm != name or name.startswith(("/", "../", ".")) or name == PARTS_FILE:
                raise ValueError(f"a part's output file must be a plain path inside the output folder, got {name!r}")
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "stats", dict(self.stats))


@dataclass(frozen=True)
class Part:
    """One input file's part of a step's output."""

    name: str
    fingerprint: str | None
    output: PartOutput
    reused: bool = False
    """Copied from an earlier build (never written in the index)."""

    @property
    def stats(self) -> Mapping[str, Any]:
        return self.output.stats

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint, "files": list(self.output.files),
                "stats": dict(self.output.stats)}


def content_fingerprint(fingerprint: str | None) -> str | None:
    """A source file's fingerprint as parts compare them: an object's ``md5:<digest>:gen<n>`` without
    its generation (the same bytes copied elsewhere compare equal); anything else as it is."""
    if fingerprint is not None and fingerprint.startswith("md5:") and ":gen" in fingerprint:
        return fingerprint.split(":gen", 1)[0]
    return fingerprint


def input_files(source: Any, suffixes: Sequence[str]) -> list[InputFile]:
    """The files of ``source`` ending in ``suffixes`` (as :func:`marin.processing.attributes.list_files`
    names and orders them), each with its fingerprint.

    Raises:
        DataError: an entry names nothing, or no file with one of ``suffixes``.
        SourceUnavailable: an entry cannot be fingerprinted.
        ValueError: two files would share a name.
    """
    entries = source_entries(source)
    # Not at import: the handles import this module; only a running step fingerprints its files.
    from marin.execution.store.sources import fingerprint_sources

    prints = fingerprint_sources([(e, None) for e in entries if not is_hf_id(e)])
    files: list[InputFile] = []
    for entry in entries:
        known = prints[(entry, None)].file_map() if (entry, None) in prints else {}
        files.extend(InputFile(s.name, s.path, content_fingerprint(known.get(s.name)))
                     for s in list_files(entry, suffixes))
    _check_unique([f.name for f in files], "two input files would share the output name")
    return files


def _check_unique(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} {name!r}; give one folder per source")
        seen.add(name)


def read_parts(folder: str) -> list[Part] | None:
    """The parts a finished output's index lists, in input order; None when it has no readable index
    (an output not made file by file, or gone)."""
    path = fs.join(folder, PARTS_FILE)
    try:
        data = json.loads(fs.read_bytes(path))
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"format {data.get('format') if isinstance(data, dict) else data!r}")
        return [Part(str(e["name"]), e["fingerprint"], PartOutput(tuple(e["files"]), e["stats"]))
                for e in data["parts"]]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        logger.warning("%s is not an index of parts (%s: %s); its parts are not reused", path, type(e).__name__, e)
        return None


def write_parts(output_path: str, parts: Sequence[Part]) -> None:
    """Write the index of ``parts`` (in input order) into ``output_path``."""
    body = {"format": _FORMAT, "parts": [p.to_json() for p in parts]}
    fs.atomic_write(fs.join(output_path, PARTS_FILE), json.dumps(body, indent=1, sort_keys=True) + "\n")


def _copy_part(folder: str, output_path: str, part: Part) -> bool:
    """Copy ``part``'s files from the earlier output ``folder``; False when one is gone."""
    try:
        for name in part.output.files:
            # A finished build's files are never written in place: locally they are linked, not copied.
            fs.copy_file(fs.join(folder, name), fs.join(output_path, name), link=True)
    except FileNotFoundError as e:
        logger.warning("%s: an output of the earlier build is gone (%s); processing it again", part.name, e)
        return False
    return True


def _copy_parts(folder: str, output_path: str, parts: Sequence[Part]) -> set[str]:
    """The names of ``parts`` copied from ``folder`` (side by side: on an object store each is a request)."""
    done = in_parallel(lambda p: _copy_part(folder, output_path, p), parts)
    return {p.name for p, ok in zip(parts, done, strict=True) if ok}


def map_files(inputs: Sequence[InputFile], output_path: str, process: Callable[[InputFile], PartOutput]) -> list[Part]:
    """Make one part of the output per input file, in input order, and write their index.

    With an earlier build to reuse (``current_step().start.reuse_parts``, decided by the plan), an
    input file whose fingerprint equals the one that build's index records has its part copied
    from there; ``process`` is called for the others. Then the build's provenance is told how
    many parts were reused and processed (:meth:`~marin.execution.run.worker.RunningStep.report_incremental`).

    Raises:
        ValueError: two input files share a name, two parts write the same file, or ``process``
            returned something other than a :class:`PartOutput`.
    """
    _check_unique([f.name for f in inputs], "two input files share the name")
    running = current_step()
    folder = running.start.reuse_parts if running is not None and running.start is not None else None
    earlier = {p.name: p for p in (read_parts(folder) or ())} if folder else {}
    reusable = [earlier[f.name] for f in inputs
                if f.fingerprint is not None and f.name in earlier and earlier[f.name].fingerprint == f.fingerprint]
    copied = _copy_parts(folder, output_path, reusable) if folder and reusable else set()
    parts = []
    for f in inputs:
        if f.name in copied:
            parts.append(dataclasses.replace(earlier[f.name], reused=True))
            continue
        made = process(f)
        if not isinstance(made, PartOutput):
            raise ValueError(f"{f.name}: processing a file must return a PartOutput, got {type(made).__name__}")
        parts.append(Part(f.name, f.fingerprint, made))
    _check_unique([name for p in parts for name in p.output.files], "two parts write the output file")
    write_parts(output_path, parts)
    if folder and running is not None:
        running.report_incremental(len(copied), len(inputs) - len(copied))
        logger.info("reused the parts of %d files of %s, processed %d", len(copied), folder, len(inputs) - len(copied))
    return parts
