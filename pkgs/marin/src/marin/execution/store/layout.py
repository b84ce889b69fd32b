"""What lies where inside one step's output folder: the store's own folders, attempt folders.

Layout of one step's output folder ``<prefix>/<name>-<hash16>``::

    ...                      the step's own files
    .marin/status.json       the newest attempt: running / failed (error, traceback)
    .marin/lease-*.json      leases (rigging.lease)
    .marin/log.txt           the step's log (stdout and stderr of its process)
    .marin/manifest.json     every output file with size and SHA-256
    .marin/provenance.json   resolved config, dependencies, environment, host, times, attempts
    .marin/signatures.json   in a cache entry pushed with a signing key: who signed what
                             (marin.execution.store.signing), written before the success record
    .marin/success.json      written last: the step is done if and only if this exists
    .attempts/<lease>/       an attempt's own folder, used in place of the step's folder by an
                             attempt that took over from a holder whose process it could not
                             see end (on another host); the status and success records name it
                             (``"data"``), and every reader goes through them
                             (:meth:`~marin.execution.store.step_record.StepRecord.files_folder`)

The step's files are in its folder itself for every attempt whose predecessors are known to have
stopped (the usual case); see docs/reliability.md, "Who may write a step's output, and when".
The paths of the records themselves are :class:`~marin.execution.store.step_record.StepRecord`'s.
"""

from __future__ import annotations

import re
from typing import Any

from rigging import filesystem as fs

__all__ = ["ATTEMPTS_DIR", "INDEX_DIR", "LOST_PREFIX", "META_DIR", "attempt_folder", "files_folder", "index_folder",
           "is_attempt_folder", "is_reserved", "short_output_path"]


META_DIR = ".marin"
ATTEMPTS_DIR = ".attempts"
"""``<output>/.attempts/<lease number>/``: attempt folders (see the module's docstring)."""
INDEX_DIR = ".marin/done"
"""The done index's folder (:mod:`marin.execution.store.done_index`), relative to the prefix."""
LOST_PREFIX = "lost-"
"""``.marin/lost-<lease number>.json``: an attempt that lost its lease and was stopped (one file per
lease, so no runner ever writes another's record)."""

_ATTEMPT_FOLDER = re.compile(rf"^{re.escape(ATTEMPTS_DIR)}/[0-9]{{8}}$")  # what attempt_folder names


def index_folder(prefix: str) -> str:
    """The folder of the done index's markers of the store at ``prefix`` (:data:`INDEX_DIR`)."""
    return fs.join(prefix, INDEX_DIR)


def attempt_folder(token: int) -> str:
    """The folder, relative to the step's, of the attempt holding lease ``token`` when it writes
    apart (:data:`ATTEMPTS_DIR`)."""
    return f"{ATTEMPTS_DIR}/{token:08d}"


def is_attempt_folder(value: Any) -> bool:
    """True for a folder :func:`attempt_folder` names, and nothing else: a record read from the
    store never sends a reader elsewhere."""
    return isinstance(value, str) and bool(_ATTEMPT_FOLDER.match(value))


def is_reserved(rel: str) -> bool:
    """True for a path (relative to a step's folder) under ``.marin/`` or ``.attempts/``: the
    store's, never part of the step's output."""
    top = rel.split("/", 1)[0]
    return top in (META_DIR, ATTEMPTS_DIR)


def short_output_path(output_path: str) -> str:
    """``<parent folder>/<name>-<hash>`` of an output folder: enough to find it under the prefix
    (what a plan's note names an earlier build by)."""
    parts = output_path.rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else output_path


def files_folder(output_path: str, attempt_folder: str) -> str:
    """The folder holding a build's files: ``attempt_folder`` (relative, as a record names it) of the
    step at ``output_path``, or the step's folder itself for ""."""
    return fs.join(output_path, attempt_folder) if attempt_folder else output_path
