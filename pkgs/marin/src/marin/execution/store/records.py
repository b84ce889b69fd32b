"""The step store: where each step's output, records and leases live under the prefix.

Layout of one step's output folder ``<prefix>/<name>-<hash16>``::

    ...                      the step's own files
    .marin/status.json       the newest attempt: running / failed (error, traceback)
    .marin/lease-*.json      leases (rigging.lease)
    .marin/log.txt           the step's log (stdout and stderr of its process)
    .marin/manifest.json     every output file with size and SHA-256
    .marin/provenance.json   resolved config, dependencies, environment, host, times, attempts
    .marin/success.json      written last: the step is done if and only if this exists
    .attempts/<lease>/       an attempt's own folder, used in place of the step's folder by an
                             attempt that took over from a holder whose process it could not
                             see end (on another host); the status and success records name it
                             (``"data"``), and every reader goes through them (:func:`data_folder`)

The step's files are in its folder itself for every attempt whose predecessors are known to have
stopped (the usual case); see docs/reliability.md, "Who may write a step's output, and when".
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from rigging import filesystem as fs
from rigging.lease import held

__all__ = ['ATTEMPTS_DIR', 'LOST_PREFIX', 'META_DIR', 'BuildState', 'StepRecord', 'StepStatus', 'data_folder',
           'data_of', 'folder_at', 'is_reserved', 'manifest_digest', 'published_here']


META_DIR = ".marin"
ATTEMPTS_DIR = ".attempts"
"""``<output>/.attempts/<lease number>/``: attempt folders (see the module's docstring)."""
_DATA_FIELD = "data"
_DATA_VALUE = re.compile(rf"^{re.escape(ATTEMPTS_DIR)}/[0-9]{{8}}$")  # what attempt_folder names
_WRITE_ONCE_TRIES = 5
LOST_PREFIX = "lost-"
"""``.marin/lost-<lease number>.json``: an attempt that lost its lease and was stopped (one file per
lease, so no runner ever writes another's record)."""


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


def is_reserved(rel: str) -> bool:
    """True for a path (relative to a step's folder) under ``.marin/`` or ``.attempts/``: the
    store's, never part of the step's output."""
    top = rel.split("/", 1)[0]
    return top in (META_DIR, ATTEMPTS_DIR)


def data_of(fields: dict[str, Any] | None) -> str:
    """The attempt folder a status or success record names (relative to the step's folder), or
    "" for the step's folder itself (no such field, or one the store would not write)."""
    value = (fields or {}).get(_DATA_FIELD)
    return value if isinstance(value, str) and _DATA_VALUE.match(value) else ""


def folder_at(output_path: str, rel: str) -> str:
    """The folder ``rel`` (an attempt folder, or "" for the step's own) of the step at ``output_path``."""
    return fs.join(output_path, rel) if rel else output_path


def data_folder(output_path: str, fields: dict[str, Any] | None) -> str:
    """Where the files of the build that ``fields`` (its success or status record) describes are."""
    return folder_at(output_path, data_of(fields))


def published_here(success: dict[str, Any]) -> dict[str, Any]:
    """A success record for a copy of its build whose files sit in the step's folder itself (a
    cache push): the same record without its attempt folder."""
    return {key: value for key, value in success.items() if key != _DATA_FIELD}


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

    def attempt_folder(self, token: int) -> str:
        """The folder, relative to the step's, of the attempt holding lease ``token`` when it
        writes apart (:data:`ATTEMPTS_DIR`)."""
        return f"{ATTEMPTS_DIR}/{token:08d}"

    def published_data(self) -> str:
        """Where the published build's files are (its success record says); the step's folder
        when it is not built or the record has no attempt folder."""
        return data_folder(self.output_path, self.read_json(self.success))

    def current_data(self) -> str:
        """Where the newest attempt writes, or the published build's files are (for progress)."""
        success = self.read_json(self.success)
        return data_folder(self.output_path, success if success is not None else self.read_json(self.status))

    def lost(self, token: int) -> str:
        """The record of an attempt that lost lease ``token`` (written by that attempt's runner)."""
        return fs.join(self.meta, f"{LOST_PREFIX}{token:08d}.json")

    def write_lost(self, token: int, data: dict[str, Any]) -> None:
        self.write_json(self.lost(token), data)

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
                     traceback: str | None = None, worker: str | None = None, data: str = "") -> None:
        """Record the newest attempt: ``worker`` names its process (``rigging.process.process_identity``),
        ``data`` its attempt folder when it writes apart (:meth:`attempt_folder`)."""
        if state not in _WRITTEN:
            raise ValueError(f"a runner records one of {[s.value for s in _WRITTEN]}, not {state.value!r}")
        body: dict[str, Any] = {"state": state.value, "attempt": attempt, "holder": holder, "time": time.time()}
        for key, value in (("worker", worker), (_DATA_FIELD, data), ("error", error), ("traceback", traceback)):
            if value:
                body[key] = value
        self.write_json(self.status, body)

    def read_status(self) -> StepStatus:
        """The newest attempt's state, with the lease consulted (see :class:`BuildState`)."""
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

    def write_once(self, path: str, data: dict[str, Any], *, listed: Collection[str],
                   still_ours: Callable[[], None]) -> None:
        """Write a record of the build being published so that no other writer can replace it:
        created only where absent (``rigging.filesystem.create_if_absent``). A copy already there
        (left by an earlier attempt, or written just now by a holder that lost the lease) is
        deleted and the create tried again, each time only after ``still_ours()`` (the lease
        check) passed.

        Args:
            listed: the names in ``.marin/`` at the caller's newest listing (an absent record is
                created at once, in one request).

        Raises:
            LeaseLost: from ``still_ours``; RuntimeError when the record keeps coming back.
        """
        body = json.dumps(data, indent=2, sort_keys=True, default=str)
        absent = path.rpartition("/")[2] not in listed
        for _ in range(_WRITE_ONCE_TRIES):
            if fs.create_if_absent(path, body, listed_absent=absent):
                return
            still_ours()
            fs.delete(path)
            absent = True
        raise RuntimeError(f"{path} was written by another holder {_WRITE_ONCE_TRIES} times over; not publishing")

    def publish(self, name: str, digest: str, manifest: dict[str, Any], extra: dict[str, Any] | None = None, *,
                listed_absent: bool = False, data: str = "") -> bool:
        """Write the success record (the step is done from now on); False if one already exists.

        Args:
            extra: more fields for the record (the output digest and realisation of
                ``marin.execution.store.realisations``).
            listed_absent: a listing of ``.marin/`` just now had no success record
                (``rigging.filesystem.create_if_absent``).
            data: the attempt folder holding the build's files (:meth:`attempt_folder`), "" for
                the step's folder.
        """
        body = {"hash": digest, "name": name, "finished_at": time.time(), "manifest_sha256": manifest_digest(manifest),
                **(extra or {})}
        if data:
            body[_DATA_FIELD] = data
        return fs.create_if_absent(self.success, json.dumps(body), listed_absent=listed_absent)
