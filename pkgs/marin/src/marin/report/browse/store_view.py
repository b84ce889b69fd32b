"""Steps of one store as ``marin browse`` sees them: found through the store, read only inside it.

A request names a step by its output name (``datakit/text-175f721f8f1c547a``) or step name (its
newest finished build), and a file by its path in the step's manifest. Anything else (a path that
leaves the prefix, a file the manifest does not list, a step that is not finished) is refused with
one line saying why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from marin.execution.store.provenance_record import Provenance
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from marin.processing.attributes import DOCUMENT_SUFFIXES, SUMMARY_FILE
from marin.report.outputs import INDEX_FILE, METRICS_FILE, read_json_object
from rigging import filesystem as fs

__all__ = ["BrowseError", "StepView", "check_relative", "inside_store", "open_step", "relative_name"]

PARQUET_SUFFIXES = (".parquet",)
TOKEN_SUFFIXES = (".array_record",)
DATA_SUFFIXES = (*DOCUMENT_SUFFIXES, *PARQUET_SUFFIXES, *TOKEN_SUFFIXES)
"""Files whose records the browser pages through."""


class BrowseError(Exception):
    """A request the browser answers with an HTTP error: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def inside_store(store: StepStore, path: str) -> bool:
    """True when ``path`` is the prefix or below it, links followed (a link out of the store is out)."""
    if fs.is_local(store.prefix):
        root = os.path.realpath(fs.strip_protocol(store.prefix))
        real = os.path.realpath(fs.strip_protocol(path))
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)
    parts = path.split("/")
    return ".." not in parts and (path == store.prefix or path.startswith(store.prefix.rstrip("/") + "/"))


def relative_name(store: StepStore, output: str) -> str:
    """An output folder of ``store`` named relative to its prefix (``<name>-<hash16>``)."""
    return output[len(store.prefix):].strip("/")


def check_relative(ref: str, what: str) -> None:
    """Refuse a reference that could leave where it is looked up (``..``, a NUL)."""
    if "\x00" in ref or ".." in ref.replace("\\", "/").split("/"):
        raise BrowseError(403, f"refused: {what} {ref!r} leaves the store")


@dataclass(frozen=True)
class StepView:
    """One finished step of the store."""

    store: StepStore
    output: str
    provenance: Provenance
    files: tuple[tuple[str, int], ...]
    folder: str
    """Where its files are (its output folder, or the attempt folder its success record names)."""

    @property
    def name(self) -> str:
        return self.provenance.name or self.output_name.rpartition("-")[0]

    @property
    def hash(self) -> str:
        return self.provenance.hash or self.output_name.rpartition("-")[2]

    @property
    def output_name(self) -> str:
        """Its output folder relative to the prefix (``<name>-<hash16>``)."""
        return relative_name(self.store, self.output)

    @cached_property
    def listed(self) -> frozenset[str]:
        return frozenset(path for path, _size in self.files)

    def path_of(self, rel: str) -> str:
        """The full path of ``rel``, a file its manifest lists (anything else is refused)."""
        check_relative(rel, "file")
        if rel not in self.listed:
            raise BrowseError(404, f"{self.output_name} has no file {rel!r}")
        path = fs.join(self.folder, rel)
        if not inside_store(self.store, path):
            raise BrowseError(403, f"refused: {self.output_name}/{rel} is outside the store")
        return path

    def data_files(self) -> list[str]:
        """Its files of records (JSON lines, Parquet, token shards), in manifest order."""
        return [p for p, _size in self.files if p.lower().endswith(DATA_SUFFIXES) and not p.startswith("_")]

    @cached_property
    def kind(self) -> str:
        """What it holds: ``tokenized``, ``training``, ``attributes``, ``documents``, ``records``
        (JSON lines without text, such as an evaluation's samples) or ``files``."""
        if INDEX_FILE in self.listed and any(p.endswith(TOKEN_SUFFIXES) for p in self.listed):
            return "tokenized"
        if METRICS_FILE in self.listed:
            return "training"
        data = [p for p in self.data_files() if not p.endswith(TOKEN_SUFFIXES)]
        if not data:
            return "files"
        from marin.report.browse.records import first_record  # the first data file's first line

        record = first_record(self.path_of(data[0]))
        if record is not None and set(record) == {"id", "attributes"}:
            return "attributes"
        return "documents" if record is not None and isinstance(record.get("text"), str) else "records"

    def summary(self) -> dict[str, Any] | None:
        """Its ``_summary.json`` (data-curation steps), or None."""
        return read_json_object(self.path_of(SUMMARY_FILE)) if SUMMARY_FILE in self.listed else None

    def config_path(self, key: str) -> str | None:
        """The path its config's ``key`` names (as its build resolved it), or None."""
        config = self.provenance.config
        value = config.get(key) if isinstance(config, dict) else None
        return value if isinstance(value, str) else None

    def input_of(self, key: str = "input") -> tuple[StepView, str] | None:
        """The step (and the folder below it) its config's ``key`` names: one of the steps it read,
        found in the store now (the store may have moved since), or None when it names no step."""
        path = self.config_path(key)
        if path is None:
            return None
        for dep in self.provenance.dependencies:
            if path == dep.path or path.startswith(dep.path.rstrip("/") + "/"):
                try:
                    upstream = open_step(self.store, relative_name(self.store, self.store.output_path_of(dep.name, dep.hash)))
                except BrowseError:
                    return None
                return upstream, path[len(dep.path):].strip("/")
        return None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "hash": self.hash, "output": self.output_name, "kind": self.kind,
                "fn": self.provenance.fn, "files": [{"path": p, "size": s} for p, s in self.files],
                "data_files": self.data_files(), "summary": self.summary(),
                "deps": [{"name": d.name, "output": relative_name(self.store, self.store.output_path_of(d.name, d.hash))}
                         for d in self.provenance.dependencies]}


def open_step(store: StepStore, ref: str) -> StepView:
    """The finished step ``ref`` names (an output name or a step name), inside ``store``.

    Raises:
        BrowseError: 400 without a name, 403 for a path outside the store, 404 when no finished
            step has that name.
    """
    ref = (ref or "").strip().rstrip("/")
    if not ref:
        raise BrowseError(400, "name a step: ?ref=<output name or step name>")
    check_relative(ref, "step")
    if (ref.startswith("/") or "://" in ref) and not inside_store(store, ref):
        raise BrowseError(403, f"refused: {ref} is outside the store {store.prefix}")
    output = store.resolve(ref)
    if output is None:
        raise BrowseError(404, f"no finished step {ref!r} in the store {store.prefix}")
    if fs.is_local(output):
        output = os.path.abspath(fs.strip_protocol(output))
    if not inside_store(store, output):
        raise BrowseError(403, f"refused: {ref!r} resolves to {output}, outside the store {store.prefix}")
    record = StepRecord(output)
    if not record.is_done():
        raise BrowseError(404, f"{ref!r} is not a finished step (nothing to browse yet)")
    return StepView(store=store, output=output, provenance=record.read_provenance() or Provenance(),
                    files=tuple(record.read_manifest_files() or ()), folder=record.files_folder())
