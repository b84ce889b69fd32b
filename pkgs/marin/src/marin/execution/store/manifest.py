"""A finished output's manifest (every file with its size and SHA-256), its content digest, and
the checks and clean-ups around them."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from marin.execution.core.traits import ALWAYS_VOLATILE
from marin.execution.store.layout import META_DIR, is_reserved
from marin.execution.store.listings import in_parallel
from rigging import filesystem as fs

__all__ = ['clear_output', 'compute_manifest', 'differing_files', 'meta_names', 'output_digest', 'remove_orphan_temporaries', 'verify_manifest']


# What rigging.filesystem.atomic_write / create_if_absent and zephyr's shard writers name their
# temporary files: ``.tmp-<uuid4 hex>-<final name>``.
_ORPHAN_TMP = re.compile(r"^\.tmp-[0-9a-f]{32}-")


def _output_files(output_path: str, listing: Iterable[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[str]]:
    """Which files of a listing are the output: those outside ``.marin/`` and ``.attempts/`` that
    are not orphaned temporaries of killed writes; the orphans are deleted as they are met.

    Returns:
        ``(the output's files with their sizes, the orphans' paths)``, relative to the output.
    """
    kept, removed = [], []
    for rel, size in listing:
        if is_reserved(rel):
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
    present = {rel: size for rel, size in fs.walk_files(output_path) if not is_reserved(rel)}
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
