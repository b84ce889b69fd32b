"""One step's records under its output folder: their paths, and how they are read and written.

The records are read and written as frozen dataclasses (:class:`StatusRecord`,
:class:`SuccessRecord`, :class:`Provenance`); a missing or unreadable record reads as None. Where
each lies in the step's folder is :mod:`marin.execution.store.layout`'s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from marin.execution.store import layout
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.signature_record import EntrySignatures
from marin.execution.store.status_record import WRITTEN_STATES, BuildState, StatusRecord, StepStatus
from marin.execution.store.success_record import SuccessRecord, manifest_digest
from rigging import filesystem as fs
from rigging.lease import held

__all__ = ["DamagedRecord", "StepRecord"]


class DamagedRecord(ValueError):
    """A record that exists but cannot be read (not JSON, or not the record's shape): for a reader
    that must not take it for absent (``marin gc`` deciding what no record names). The message
    names the file."""


_WRITE_ONCE_TRIES = 5


@dataclass(frozen=True)
class StepRecord:
    """Paths of one step's output and its records."""

    output_path: str

    @property
    def meta(self) -> str:
        return fs.join(self.output_path, layout.META_DIR)

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
    def signatures(self) -> str:
        return fs.join(self.meta, "signatures.json")

    @property
    def log(self) -> str:
        return fs.join(self.meta, "log.txt")

    def attempt_folder(self, token: int) -> str:
        """The folder, relative to the step's, of the attempt holding lease ``token`` when it
        writes apart (:func:`~marin.execution.store.layout.attempt_folder`)."""
        return layout.attempt_folder(token)

    def files_folder(self, *, current: bool = False) -> str:
        """The folder holding the published build's files (its success record names it); the
        step's folder when it is not built or the record names no attempt folder.

        Args:
            current: while it is not built, the folder its newest attempt writes in (its status
                record names it), for progress.
        """
        record: SuccessRecord | StatusRecord | None = self.read_success()
        if record is None and current:
            record = self.read_status_record()
        return layout.files_folder(self.output_path, record.attempt_folder if record is not None else "")

    def lost(self, token: int) -> str:
        """The record of an attempt that lost lease ``token`` (written by that attempt's runner)."""
        return fs.join(self.meta, f"{layout.LOST_PREFIX}{token:08d}.json")

    def write_lost(self, token: int, *, attempt: int, holder: str, why: str, lost_at: float | None) -> None:
        """Record that the attempt holding lease ``token`` lost it and was stopped: lost, not failed."""
        self.write_json(self.lost(token), {"state": "lost", "attempt": attempt, "holder": holder, "why": why,
                                           "lost_at": lost_at, "stopped_at": time.time()})

    def read_lost(self, file_name: str) -> dict[str, Any] | None:
        """The record ``.marin/<file_name>`` of an attempt that lost its lease (:meth:`write_lost`)."""
        return self.read_json(fs.join(self.meta, file_name))

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

    def _read_checked(self, path: str, parse: Callable[[Any], Any]) -> Any:
        """``parse`` of the JSON record at ``path``; None when it does not exist.

        Raises:
            DamagedRecord: it exists but is not JSON, or ``parse`` makes nothing of it.
        """
        try:
            text = fs.read_text(path)
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise DamagedRecord(f"{path} is damaged (not UTF-8 text)") from None
        try:
            record = parse(json.loads(text))
        except ValueError:
            record = None
        if record is None:
            raise DamagedRecord(f"{path} is damaged ({'empty' if not text.strip() else 'not the record it should be'})")
        return record

    def read_success_checked(self) -> SuccessRecord | None:
        """The success record, None when there is none.

        Raises:
            DamagedRecord: it exists but cannot be read (never taken for "not done" here).
        """
        return self._read_checked(self.success, SuccessRecord.from_json)

    def read_status_checked(self) -> StatusRecord | None:
        """The status record, None when there is none.

        Raises:
            DamagedRecord: it exists but cannot be read.
        """
        return self._read_checked(self.status, StatusRecord.from_json)

    def read_success(self) -> SuccessRecord | None:
        """The success record, or None when the step is not done or its record is unreadable."""
        return SuccessRecord.from_json(self.read_json(self.success))

    def read_status_record(self) -> StatusRecord | None:
        """The status record as its runner wrote it (the lease not consulted: :meth:`read_status`),
        or None when it is missing or unreadable."""
        return StatusRecord.from_json(self.read_json(self.status))

    def read_provenance(self) -> Provenance | None:
        """The provenance record, or None when it is missing or unreadable."""
        return Provenance.from_json(self.read_json(self.provenance))

    def read_manifest_files(self) -> list[tuple[str, int]] | None:
        """``(path, size)`` of every file of the output, as its manifest lists them (paths relative
        to :meth:`files_folder`), or None when there is no readable manifest."""
        manifest = self.read_json(self.manifest)
        files = manifest.get("files") if manifest is not None else None
        if not isinstance(files, list):
            return None
        return [(f["path"], f["size"]) for f in files
                if isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("size"), int)]

    def read_signatures(self) -> EntrySignatures | None:
        """The signatures of a cache entry (``marin.execution.store.signing``), or None when it
        carries none or the record is unreadable."""
        return EntrySignatures.from_json(self.read_json(self.signatures))

    def write_json(self, path: str, data: dict[str, Any]) -> None:
        # The status record is a progress note: not worth an fsync (rigging.filesystem.atomic_write).
        fs.atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str), durable=path != self.status)

    def write_status(self, state: BuildState, attempt: int, holder: str, *, error: str | None = None,
                     traceback: str | None = None, worker: str | None = None, attempt_folder: str = "") -> None:
        """Record the newest attempt: ``worker`` names its process (``rigging.process.process_identity``),
        ``attempt_folder`` the folder it writes in when it writes apart (:meth:`attempt_folder`)."""
        if state not in WRITTEN_STATES:
            raise ValueError(f"a runner records one of {[s.value for s in WRITTEN_STATES]}, not {state.value!r}")
        record = StatusRecord(state, attempt, holder, time.time(), worker or None, attempt_folder, error or None,
                              traceback or None)
        self.write_json(self.status, record.to_json())

    def read_status(self) -> StepStatus:
        """The newest attempt's state, with the lease consulted (see :class:`BuildState`)."""
        record = self.read_status_record()
        if record is None or record.state is None:
            return StepStatus(BuildState.MISSING, record=record)
        error = record.error or None
        if record.state is BuildState.FAILED:
            return StepStatus(BuildState.FAILED, record.attempt, record.holder, error, record, record.state)
        lease = held(self.meta)
        if lease is not None:
            return StepStatus(BuildState.RUNNING, record.attempt, lease.holder, error, record, record.state)
        return StepStatus(BuildState.KILLED, record.attempt, record.holder, error, record, record.state)

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

    def publish(self, name: str, digest: str, manifest: dict[str, Any], content: SuccessRecord | None = None, *,
                listed_absent: bool = False, attempt_folder: str = "", ttl_s: float | None = None) -> bool:
        """Write the success record (the step is done from now on); False if one already exists.

        Args:
            content: what the record says of the build's content (its output digest and
                realisation, ``marin.execution.store.realisations``); its other fields are set here.
            listed_absent: a listing of ``.marin/`` just now had no success record
                (``rigging.filesystem.create_if_absent``).
            attempt_folder: the attempt folder holding the build's files (:meth:`attempt_folder`),
                "" for the step's folder.
            ttl_s: how long the output is worth keeping (the step's ``ttl``), None for ever.
        """
        record = replace(content or SuccessRecord(), hash=digest, name=name, finished_at=time.time(),
                         manifest_sha256=manifest_digest(manifest), attempt_folder=attempt_folder, ttl_s=ttl_s)
        return fs.create_if_absent(self.success, json.dumps(record.to_json()), listed_absent=listed_absent)
