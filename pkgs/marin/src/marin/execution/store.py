"""The step store: where each step's output, records and leases live under the prefix.

Layout of one step's output folder ``<prefix>/<name>-<hash16>``::

    ...                      the step's own files
    .marin/status.json       the newest attempt: running / failed (error, traceback)
    .marin/lease-*.json      leases (rigging.lease)
    .marin/log.txt           the step's log (stdout and stderr of its process)
    .marin/manifest.json     every output file with size and SHA-256
    .marin/provenance.json   resolved config, dependencies, environment, host, times, attempts
    .marin/success.json      written last: the step is done if and only if this exists
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rigging import filesystem as fs

__all__ = [
    "ALWAYS_VOLATILE",
    "META_DIR",
    "BuildState",
    "FolderListings",
    "StepRecord",
    "StepStatus",
    "StepStore",
    "compute_manifest",
    "differing_files",
    "finished_builds",
    "in_parallel",
    "manifest_digest",
    "meta_names",
    "output_digest",
    "parent_folder",
    "remove_orphan_temporaries",
    "verify_manifest",
]

META_DIR = ".marin"

T = TypeVar("T")
R = TypeVar("R")


class BuildState(enum.Enum):
    """Where a step's newest attempt stands, as its records and its lease say.

    The runner writes ``RUNNING``, ``FAILED`` and ``INTERRUPTED``; a reader gets ``RUNNING`` only
    while a runner holds the step's lease, ``KILLED`` for an attempt that stopped without a word
    (its runner died), ``MISSING`` when no attempt left a readable record.
    """

    MISSING = "missing"
    RUNNING = "running"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    KILLED = "killed"


_WRITTEN = (BuildState.RUNNING, BuildState.FAILED, BuildState.INTERRUPTED)


@dataclass(frozen=True)
class StepStatus:
    """The newest attempt of a step: its state and the fields its status record holds."""

    state: BuildState
    attempt: int = 0
    holder: str | None = None
    """Who ran the attempt; for ``RUNNING``, who holds the lease now."""
    error: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """The whole status record (``time``, ``traceback``, ``worker`` ...)."""
    written: BuildState | None = None
    """The state the runner wrote, before the lease was consulted."""


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The digest of a manifest's file list that the success record carries (``manifest_sha256``)."""
    return hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class StepRecord:
    """Paths of one step's output and its records."""

    output_path: str

    @property
    def meta(self) -> str:
        return fs.join(self.output_path, META_DIR)

    @property
    def success(self) -> str:
        return fs.join(self.meta, "success.json")

    @property
    def status(self) -> str:
        return fs.join(self.meta, "status.json")

    @property
    def provenance(self) -> str:
        return fs.join(self.meta, "provenance.json")

    @property
    def manifest(self) -> str:
        return fs.join(self.meta, "manifest.json")

    @property
    def log(self) -> str:
        return fs.join(self.meta, "log.txt")

    def is_done(self) -> bool:
        if fs.is_local(self.output_path):
            return os.path.exists(fs.strip_protocol(self.success))
        return fs.file_exists(self.success)

    def read_json(self, path: str) -> dict[str, Any] | None:
        """The JSON record at ``path``, or None when it is missing or unreadable."""
        try:
            data = json.loads(fs.read_text(path))
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def write_json(self, path: str, data: dict[str, Any]) -> None:
        # The status record is a progress note: not worth an fsync (rigging.filesystem.atomic_write).
        fs.atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str), durable=path != self.status)

    def write_status(self, state: BuildState, attempt: int, holder: str, *, error: str | None = None,
                     traceback: str | None = None, worker: str | None = None) -> None:
        """Record the newest attempt: ``worker`` names its process (``rigging.process.process_identity``)."""
        if state not in _WRITTEN:
            raise ValueError(f"a runner records one of {[s.value for s in _WRITTEN]}, not {state.value!r}")
        data: dict[str, Any] = {"state": state.value, "attempt": attempt, "holder": holder, "time": time.time()}
        for key, value in (("worker", worker), ("error", error), ("traceback", traceback)):
            if value:
                data[key] = value
        self.write_json(self.status, data)

    def read_status(self) -> StepStatus:
        """The newest attempt's state, with the lease consulted (see :class:`BuildState`)."""
        from rigging.lease import held

        data = self.read_json(self.status)
        state = (data or {}).get("state")
        written = {s.value: s for s in _WRITTEN}.get(state) if isinstance(state, str) else None
        if data is None or written is None:
            return StepStatus(BuildState.MISSING, fields=data or {})
        attempt = data.get("attempt")
        attempt = attempt if type(attempt) is int else 0
        error = str(data["error"]) if data.get("error") else None
        holder = data.get("holder") if isinstance(data.get("holder"), str) else None
        if written is BuildState.FAILED:
            return StepStatus(BuildState.FAILED, attempt, holder, error, data, written)
        lease = held(self.meta)
        if lease is not None:
            return StepStatus(BuildState.RUNNING, attempt, lease.holder, error, data, written)
        return StepStatus(BuildState.KILLED, attempt, holder, error, data, written)

    def publish(self, name: str, digest: str, manifest: dict[str, Any], extra: dict[str, Any] | None = None, *,
                listed_absent: bool = False) -> bool:
        """Write the success record (the step is done from now on); False if one already exists.

        Args:
            extra: more fields for the record (the output digest and realisation of
                ``marin.execution.realise``).
            listed_absent: a listing of ``.marin/`` just now had no success record
                (``rigging.filesystem.create_if_absent``).
        """
        body = {"hash": digest, "name": name, "finished_at": time.time(), "manifest_sha256": manifest_digest(manifest),
                **(extra or {})}
        return fs.create_if_absent(self.success, json.dumps(body), listed_absent=listed_absent)


def parent_folder(prefix: str, name: str) -> str:
    """The folder under ``prefix`` that holds the outputs of the step ``name`` (every hash of it)."""
    parent = name.rpartition("/")[0]
    return fs.join(prefix, parent) if parent else prefix


def finished_builds(prefix: str, name: str, *, exclude: str = "",
                    listing: Iterable[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Finished builds of the step ``name`` (any hash) under ``prefix``: (output path, success record).

    Args:
        exclude: an output path to leave out (not looked at).
        listing: the names in the step's parent folder (:func:`parent_folder`), when the caller
            has just listed it.
    """
    base = name.rpartition("/")[2]
    folder = parent_folder(prefix, name)
    found = []
    for entry in listing if listing is not None else fs.listdir(folder):
        stem, dash, digest = entry.rpartition("-")
        if not dash or stem != base or len(digest) != 16 or fs.join(folder, entry) == exclude:
            continue
        record = StepRecord(fs.join(folder, entry))
        success = record.read_json(record.success)
        if success is not None:
            found.append((record.output_path, success))
    return found


_PARALLEL_LOOKUPS = 32


def in_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, side by side in threads when there are several: each is a
    round trip on an object store."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(_PARALLEL_LOOKUPS, len(items))) as pool:
        return list(pool.map(fn, items))


class FolderListings:
    """Names in folders of a store, each folder listed once: a plan's view of the store, so that
    asking about a thousand outputs of one folder costs one listing (a page per 1,000 names)."""

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str]] = {}

    def fetch(self, folders: Iterable[str]) -> None:
        """List the ``folders`` not listed yet, side by side."""
        wanted = sorted(set(folders) - set(self._names))
        for folder, names in zip(wanted, in_parallel(fs.listdir, wanted), strict=True):
            self._names[folder] = frozenset(names)

    def names(self, folder: str) -> frozenset[str]:
        """The names directly in ``folder`` (listed now if not yet)."""
        self.fetch([folder])
        return self._names[folder]

    def has(self, path: str) -> bool:
        """True when ``path`` was in its folder's listing."""
        folder, _, base = path.rstrip("/").rpartition("/")
        return base in self.names(folder)


class StepStore:
    """Maps steps to folders under a prefix (local path, ``gs://`` or ``memory://``)."""

    def __init__(self, prefix: str):
        if not prefix:
            raise ValueError("prefix must be a non-empty path or URL")
        if fs.is_local(prefix):
            prefix = os.path.abspath(fs.strip_protocol(prefix))
        self.prefix = prefix.rstrip("/") if prefix != "/" else prefix

    def output_path(self, output_name: str) -> str:
        return fs.join(self.prefix, output_name)

    def record(self, output_name: str) -> StepRecord:
        return StepRecord(self.output_path(output_name))

    def earlier_builds(self, name: str, listing: Iterable[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Successful builds of the step ``name`` (any hash): (output path, provenance), newest first.

        ``listing``: the names in its parent folder, as for :func:`finished_builds`.
        """
        found = []
        for output_path, success in finished_builds(self.prefix, name, listing=listing):
            record = StepRecord(output_path)
            provenance = record.read_json(record.provenance) or {}
            finished = success.get("finished_at")
            # A damaged record of an old build must not stop every later plan of this name.
            when = (float(finished) if isinstance(finished, (int, float)) and not isinstance(finished, bool)
                    and math.isfinite(finished) else 0.0)
            found.append((record.output_path, provenance, when))
        found.sort(key=lambda row: row[2], reverse=True)
        return [(path, prov) for path, prov, _ in found]


# What rigging.filesystem.atomic_write / create_if_absent and zephyr's shard writers name their
# temporary files: ``.tmp-<uuid4 hex>-<final name>``.
_ORPHAN_TMP = re.compile(r"^\.tmp-[0-9a-f]{32}-")


def _output_files(output_path: str, listing: Iterable[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[str]]:
    """Which files of a listing are the output: those outside ``.marin/`` that are not orphaned
    temporaries of killed writes; the orphans are deleted as they are met.

    Returns:
        ``(the output's files with their sizes, the orphans' paths)``, relative to the output.
    """
    kept, removed = [], []
    for rel, size in listing:
        if rel == META_DIR or rel.startswith(META_DIR + "/"):
            continue
        if _ORPHAN_TMP.match(rel.rsplit("/", 1)[-1]):
            fs.delete(fs.join(output_path, rel))
            removed.append(rel)
        else:
            kept.append((rel, size))
    return kept, removed


def remove_orphan_temporaries(output_path: str) -> list[str]:
    """Delete temporary files that killed writes left in a finished output; returns their paths.

    A write killed by SIGKILL cannot clean up after itself. Once the step has finished (its
    process is gone, the caller holds the lease) no write is in flight, so every such file is an
    orphan: it must never be published as part of the output.
    """
    return _output_files(output_path, list(fs.walk_files(output_path)))[1]


def meta_names(files: Iterable[tuple[str, int]]) -> list[str]:
    """The names of the files directly in ``.marin/``, from a listing of the whole output
    (:func:`rigging.filesystem.walk_files`): its records and leases."""
    inside = [rel[len(META_DIR) + 1:] for rel, _size in files if rel.startswith(META_DIR + "/")]
    return [name for name in inside if "/" not in name]


def compute_manifest(output_path: str, files: Iterable[tuple[str, int]] | None = None) -> dict[str, Any]:
    """Every file of the output (outside ``.marin/``) with its size and SHA-256.

    Orphaned temporary files of killed writes are deleted and left out, by the same rule as
    :func:`remove_orphan_temporaries`, from the one listing: the manifest is computed when a step
    has finished, and they are never part of its output.

    Args:
        files: the output's listing (:func:`rigging.filesystem.walk_files`), when the caller has
            just made it.
    """
    found, _removed = _output_files(output_path, list(files if files is not None else fs.walk_files(output_path)))

    def digest(file: tuple[str, int]) -> str:
        return fs.sha256_of(fs.join(output_path, file[0]), size=file[1])

    digests = [digest(f) for f in found] if fs.is_local(output_path) else in_parallel(digest, found)
    entries = [{"path": rel, "size": size, "sha256": sha} for (rel, size), sha in zip(found, digests, strict=True)]
    return {"files": entries, "total_bytes": sum(size for _rel, size in found), "created_at": time.time()}


ALWAYS_VOLATILE: tuple[str, ...] = (".commits/*",)
"""Output files that differ between two builds of the same inputs, whatever the step: zephyr's
shard commit records name the absolute paths of the input files they were made from (found by
building the same graph under two prefixes and comparing manifests). A step adds its own in its
config's ``VOLATILE_FILES`` (``marin.execution.realise.volatile_patterns``)."""


def _is_volatile(rel: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def output_digest(manifest: dict[str, Any], volatile: Sequence[str] = ALWAYS_VOLATILE) -> str:
    """One SHA-256 over the output's content: every file's path and digest, in path order, except
    the files matching ``volatile`` (glob patterns on paths relative to the output; ``*`` spans
    folders). Two outputs with the same digest hold the same files with the same bytes.
    """
    kept = sorted((e["path"], e["sha256"]) for e in manifest["files"] if not _is_volatile(e["path"], volatile))
    return hashlib.sha256(json.dumps(kept, separators=(",", ":")).encode("utf-8")).hexdigest()


def differing_files(first: dict[str, Any], second: dict[str, Any],
                    volatile: Sequence[str] = ALWAYS_VOLATILE) -> list[str]:
    """Paths (sorted) whose content differs between two manifests, or that only one has, less ``volatile``."""
    a = {e["path"]: e["sha256"] for e in first["files"] if not _is_volatile(e["path"], volatile)}
    b = {e["path"]: e["sha256"] for e in second["files"] if not _is_volatile(e["path"], volatile)}
    return sorted(rel for rel in set(a) | set(b) if a.get(rel) != b.get(rel))


def _manifest_shape_problem(manifest: Any) -> str | None:
    """Why ``manifest`` is not ``{"files": [{"path": str, "size": int, "sha256": str}, ...]}``, or None."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list):
        return "manifest malformed: no list of files"
    for i, entry in enumerate(files):
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
                and type(entry.get("size")) is int and isinstance(entry.get("sha256"), str)):
            return f"manifest malformed: entry {i} is not {{path, size, sha256}}"
    return None


def verify_manifest(output_path: str, manifest: dict[str, Any]) -> list[str]:
    """Problems found when re-checking ``manifest`` against the files now present ([] if none).

    A manifest that is not the shape :func:`compute_manifest` writes is one problem starting with
    ``"manifest malformed"``: a damaged record must never read as "nothing to check".
    """
    shape = _manifest_shape_problem(manifest)
    if shape is not None:
        return [shape]
    problems = []
    present = {rel: size for rel, size in fs.walk_files(output_path) if not rel.startswith(META_DIR + "/")}
    for entry in manifest["files"]:
        rel = entry["path"]
        if rel not in present:
            problems.append(f"{rel}: missing")
        elif present[rel] != entry["size"]:
            problems.append(f"{rel}: size {present[rel]} != {entry['size']}")
        else:
            try:
                digest = fs.sha256_of(fs.join(output_path, rel), size=present[rel])
            except OSError as e:
                problems.append(f"{rel}: unreadable ({type(e).__name__})")
                continue
            if digest != entry["sha256"]:
                problems.append(f"{rel}: checksum changed")
    return problems


def clear_output(output_path: str) -> None:
    """Remove everything of a step's output except its lease files (for --force, refused caches)."""
    for name in fs.listdir(output_path):
        if name == META_DIR:
            for meta in fs.listdir(fs.join(output_path, META_DIR)):
                if not meta.startswith("lease-"):
                    fs.rm_tree(fs.join(output_path, META_DIR, meta))
        else:
            fs.rm_tree(fs.join(output_path, name))
