"""Turning a source (paths, globs, folders, or a list of them) into the files it names, in sorted order."""

from __future__ import annotations

import os
from collections.abc import Iterable

from rigging import filesystem as fs
from zephyr.errors import DataError

__all__ = ["expand_paths"]

_GLOB_CHARS = frozenset("*?[")


def _is_dir(path: str) -> bool:
    if fs.is_local(path):
        return os.path.isdir(fs.strip_protocol(path))
    return bool(fs.filesystem(path).isdir(path))


def _hidden(relative: str) -> bool:
    # Bookkeeping files of writers and tools (.tmp-*, _SUCCESS, .commits/) are not data.
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def _hf_hint(entry: str) -> str:
    if not entry.startswith("hf://"):
        return ""
    return " (hf:// needs network access to the Hugging Face Hub; offline, point at a local copy instead)"


def expand_paths(source: str | Iterable[str]) -> list[str]:
    """Expand a path, glob, folder, or a list of them, into files (sorted within each entry).

    Raises:
        DataError: an entry names nothing (a missing file, a glob matching nothing, an empty folder).
    """
    entries = [source] if isinstance(source, str) else list(source)
    if not entries:
        raise DataError("<source>", "", "no input paths given")
    files: list[str] = []
    for entry in entries:
        try:
            if any(c in entry for c in _GLOB_CHARS):
                # A pattern matches hidden files only when it asks for them (".tmp-*").
                wants_hidden = entry.rstrip("/").rsplit("/", 1)[-1].startswith((".", "_"))
                matched = [p for p in fs.glob(entry)
                           if (wants_hidden or not _hidden(p.rsplit("/", 1)[-1])) and not _is_dir(p)]
                if not matched:
                    raise DataError(entry, "", "no files match this pattern")
                files.extend(matched)
            elif not fs.exists(entry):
                raise DataError(entry, "", "file not found" + _hf_hint(entry))
            elif _is_dir(entry):
                found = [fs.join(entry, rel) for rel, _size in fs.walk_files(entry) if not _hidden(rel)]
                if not found:
                    raise DataError(entry, "", "folder holds no data files")
                files.extend(found)
            else:
                files.append(entry)
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - re-raised as one clear error naming the path
            # hf:// offline (httpx errors are not OSErrors), an unreachable bucket, a protocol
            # whose package is missing: all mean "this source cannot be listed".
            raise DataError(entry, "", f"cannot be listed: {type(e).__name__}: {e}{_hf_hint(entry)}") from e
    return files
