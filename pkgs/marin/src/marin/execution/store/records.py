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
                             (``"data"``), and every reader goes through them (:meth:`StepRecord.files_folder`)

The step's files are in its folder itself for every attempt whose predecessors are known to have
stopped (the usual case); see docs/reliability.md, "Who may write a step's output, and when".

The status, success and provenance records are read and written as frozen dataclasses
(:class:`StatusRecord`, :class:`SuccessRecord`, :class:`Provenance`): only this module spells
their JSON keys. New records carry ``"format": RECORD_FORMAT``; records written before that (no
``format``) read the same. Keys this code does not know, and values of the wrong type, are kept in
``extra`` and written back as they were; a missing or unreadable record reads as None.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rigging import filesystem as fs
from rigging.lease import held

__all__ = ['ATTEMPTS_DIR', 'LOST_PREFIX', 'META_DIR', 'RECORD_FORMAT', 'BuildState', 'Dependency', 'Provenance', 'RealisedFrom',
           'StatusRecord', 'StepRecord', 'StepStatus', 'SuccessRecord', 'files_folder', 'is_reserved',
           'manifest_digest']


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


RECORD_FORMAT = 1
"""The form of the status, success and provenance records this code writes (their ``format``
field). Records without one (format 0) were written before records carried it; they read the same."""
_FORMAT_KEY = "format"


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _is_attempt_folder(value: Any) -> bool:
    # Only what :meth:`StepRecord.attempt_folder` writes: a record never sends a reader elsewhere.
    return isinstance(value, str) and bool(_DATA_VALUE.match(value))


def _is_state(value: Any) -> bool:
    return isinstance(value, str) and value in {s.value for s in _WRITTEN}


def _is_dependencies(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(d, dict) and set(d) == {"name", "hash", "path"} and all(isinstance(v, str) for v in d.values())
        for d in value)


@dataclass(frozen=True)
class _Key:
    """How one attribute of a record is spelled in its JSON, and which values it accepts."""

    attr: str
    key: str
    accepts: Callable[[Any], bool]
    always: bool = False
    """Written even when empty (None); otherwise left out then."""


def _fields_from(data: Any, keys: tuple[_Key, ...]) -> dict[str, Any] | None:
    """The constructor arguments of a record from its JSON: each known key whose value has the
    expected type becomes its attribute; everything else (unknown keys, values of the wrong type)
    is kept in ``extra`` and written back as it was. None when ``data`` is not a JSON object."""
    if not isinstance(data, dict):
        return None
    rest = dict(data)
    version = rest.pop(_FORMAT_KEY, 0)
    kwargs: dict[str, Any] = {"format": version if _is_int(version) else 0}
    for k in keys:
        if k.key in rest and (k.accepts(rest[k.key]) or (k.always and rest[k.key] is None)):
            kwargs[k.attr] = rest.pop(k.key)
    kwargs["extra"] = rest
    return kwargs


def _json_of(record: Any, keys: tuple[_Key, ...]) -> dict[str, Any]:
    body: dict[str, Any] = dict(record.extra)
    for k in keys:
        if k.key in record.extra:
            continue  # a value read that the attribute could not hold: written back as it was
        value = getattr(record, k.attr)
        if k.always or (value is not None and value != ""):
            body[k.key] = value
    body[_FORMAT_KEY] = RECORD_FORMAT
    return body


@dataclass(frozen=True)
class StatusRecord:
    """``.marin/status.json``: the newest attempt of a step, as its runner wrote it."""

    state: BuildState | None = None
    """What the runner wrote (running, failed, interrupted); None when the record has no such state."""
    attempt: int = 0
    holder: str | None = None
    """The runner that made the attempt."""
    time: float | None = None
    """When it was written."""
    worker: str | None = None
    """The attempt's process (``rigging.process.process_identity``), when the runner knows it."""
    attempt_folder: str = ""
    """The attempt folder it writes in (:meth:`StepRecord.attempt_folder`), "" for the step's folder."""
    error: str | None = None
    traceback: str | None = None
    format: int = RECORD_FORMAT
    """The record's form as read (0: written before records carried one)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this code does not know (or values of the wrong type), kept as they were."""

    _KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("state", "state", _is_state, always=True), _Key("attempt", "attempt", _is_int, always=True),
        _Key("holder", "holder", _is_str, always=True), _Key("time", "time", _is_number, always=True),
        _Key("worker", "worker", _is_str), _Key("attempt_folder", _DATA_FIELD, _is_attempt_folder),
        _Key("error", "error", _is_str), _Key("traceback", "traceback", _is_str))

    def to_json(self) -> dict[str, Any]:
        body = _json_of(self, self._KEYS)
        if "state" not in self.extra:
            if self.state is not None:
                body["state"] = self.state.value
            else:
                del body["state"]
        return body

    @classmethod
    def from_json(cls, data: Any) -> StatusRecord | None:
        kwargs = _fields_from(data, cls._KEYS)
        if kwargs is None:
            return None
        if "state" in kwargs:
            kwargs["state"] = BuildState(kwargs["state"])
        return cls(**kwargs)


@dataclass(frozen=True)
class SuccessRecord:
    """``.marin/success.json``: the step is done; what it built (its content's digests) and where."""

    hash: str | None = None
    name: str | None = None
    finished_at: float | None = None
    manifest_sha256: str | None = None
    """:func:`manifest_digest` of the manifest published with it."""
    output_digest: str | None = None
    """The digest of its output's content (``marin.execution.store.manifest.output_digest``)."""
    realisation_key: str | None = None
    """Its step over its inputs' content (``marin.execution.core.hashing.realisation_key``)."""
    inputs: list[dict[str, Any]] | None = None
    """Its inputs, as the realisation key names them: ``{"name", "hash", "digest"}`` each."""
    realised_from: str | None = None
    """The earlier build of the same inputs it is a copy of, if it is one."""
    attempt_folder: str = ""
    """The attempt folder holding its files (:meth:`StepRecord.attempt_folder`), "" for the step's folder."""
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[_Key, ...]] = (
        _Key("hash", "hash", _is_str, always=True), _Key("name", "name", _is_str, always=True),
        _Key("finished_at", "finished_at", _is_number, always=True),
        _Key("manifest_sha256", "manifest_sha256", _is_str, always=True),
        _Key("output_digest", "output_digest", _is_str), _Key("realisation_key", "realisation_key", _is_str),
        _Key("inputs", "inputs", _is_list), _Key("realised_from", "realised_from", _is_str),
        _Key("attempt_folder", _DATA_FIELD, _is_attempt_folder))

    def to_json(self) -> dict[str, Any]:
        return _json_of(self, self._KEYS)

    @classmethod
    def from_json(cls, data: Any) -> SuccessRecord | None:
        kwargs = _fields_from(data, cls._KEYS)
        return cls(**kwargs) if kwargs is not None else None

    def carried(self) -> SuccessRecord:
        """What a copy of this build (fetched from a cache, published elsewhere) keeps: its
        content's digests and inputs; the caller fills in the rest."""
        return SuccessRecord(output_digest=self.output_digest, realisation_key=self.realisation_key,
                             inputs=self.inputs)

    def published_here(self) -> SuccessRecord:
        """The record of a copy of its build whose files sit in the step's folder itself (a
        cache push): the same record without its attempt folder."""
        return replace(self, attempt_folder="", extra={k: v for k, v in self.extra.items() if k != _DATA_FIELD})


@dataclass(frozen=True)
class Dependency:
    """A step a build read, as its provenance records it."""

    name: str
    hash: str
    path: str
    """Its output folder when the build ran."""


@dataclass(frozen=True)
class RealisedFrom:
    """The earlier build of the same inputs a build was copied from (its provenance says)."""

    path: str
    hash: str
    output_digest: str
    copied_in_s: float

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "hash": self.hash, "output_digest": self.output_digest,
                "copied_in_s": self.copied_in_s}


def _is_realised_from(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"path", "hash", "output_digest", "copied_in_s"}
            and all(isinstance(value[k], str) for k in ("path", "hash", "output_digest"))
            and _is_number(value["copied_in_s"]))


@dataclass(frozen=True)
class Provenance:
    """``.marin/provenance.json``: what a build was made from, where and when, and what it made."""

    name: str | None = None
    hash: str | None = None
    version: str | None = None
    fn: str | None = None
    """The step function's identity (``module:qualname``)."""
    config: Any = None
    """The resolved config, as JSON (secrets redacted)."""
    config_flat: dict[str, Any] | None = None
    """The hashed fields, flattened (``{"dotted.key": canonical text}``)."""
    dependencies: tuple[Dependency, ...] = ()
    environment: dict[str, Any] | None = None
    """The environment fingerprint (``marin.execution.store.environment``)."""
    env_digest: str | None = None
    strict_env: bool | None = None
    host: str | None = None
    runner: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    attempts: int | None = None
    retries: int | None = None
    client: str | None = None
    resources: str | None = None
    reasons: list[Any] | None = None
    """Why it was built (``Reason.to_json()`` each)."""
    worker: Any = None
    """What the worker reported of its run (timings)."""
    output_bytes: int | None = None
    output_files: int | None = None
    lost_attempts: list[Any] | None = None
    """Records of earlier attempts that lost their lease (:meth:`StepRecord.write_lost`)."""
    nondeterminism: dict[str, Any] | None = None
    realised_from: RealisedFrom | None = None
    """The earlier build of the same inputs it was copied from."""
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[_Key, ...]] = (
        *(_Key(a, a, _is_str, always=True) for a in ("name", "hash", "version", "fn")),
        _Key("config", "config", lambda v: True, always=True),
        _Key("config_flat", "config_flat", _is_dict, always=True),
        _Key("dependencies", "dependencies", _is_dependencies, always=True),
        _Key("environment", "environment", _is_dict, always=True),
        _Key("env_digest", "env_digest", _is_str, always=True),
        _Key("strict_env", "strict_env", _is_bool, always=True),
        _Key("host", "host", _is_str, always=True), _Key("runner", "runner", _is_str, always=True),
        *(_Key(a, a, _is_number, always=True) for a in ("started_at", "finished_at", "duration_s")),
        _Key("attempts", "attempts", _is_int, always=True), _Key("retries", "retries", _is_int, always=True),
        _Key("client", "client", _is_str, always=True), _Key("resources", "resources", _is_str, always=True),
        _Key("reasons", "reasons", _is_list, always=True), _Key("worker", "worker", lambda v: True, always=True),
        _Key("output_bytes", "output_bytes", _is_int, always=True),
        _Key("output_files", "output_files", _is_int, always=True),
        _Key("lost_attempts", "lost_attempts", _is_list), _Key("nondeterminism", "nondeterminism", _is_dict),
        _Key("realised_from", "realised_from", _is_realised_from))

    def to_json(self) -> dict[str, Any]:
        body = _json_of(self, self._KEYS)
        if "dependencies" not in self.extra:
            body["dependencies"] = [{"name": d.name, "hash": d.hash, "path": d.path} for d in self.dependencies]
        if self.realised_from is not None and "realised_from" not in self.extra:
            body["realised_from"] = self.realised_from.to_json()
        return body

    @classmethod
    def from_json(cls, data: Any) -> Provenance | None:
        kwargs = _fields_from(data, cls._KEYS)
        if kwargs is None:
            return None
        if "dependencies" in kwargs:
            kwargs["dependencies"] = tuple(Dependency(**d) for d in kwargs["dependencies"] or ())
        if "realised_from" in kwargs:
            kwargs["realised_from"] = RealisedFrom(**kwargs["realised_from"])
        return cls(**kwargs)

    def dependency_paths(self) -> dict[str, str]:
        """``{hash: output folder}`` of the dependencies it records."""
        return {d.hash: d.path for d in self.dependencies}


@dataclass(frozen=True)
class StepStatus:
    """The newest attempt of a step: its state, as its status record and its lease say."""

    state: BuildState
    attempt: int = 0
    holder: str | None = None
    """Who ran the attempt; for ``RUNNING``, who holds the lease now."""
    error: str | None = None
    record: StatusRecord | None = None
    """The status record itself (``time``, ``traceback``, ``worker`` ...); None when there is none."""
    written: BuildState | None = None
    """The state the runner wrote, before the lease was consulted."""


def is_reserved(rel: str) -> bool:
    """True for a path (relative to a step's folder) under ``.marin/`` or ``.attempts/``: the
    store's, never part of the step's output."""
    top = rel.split("/", 1)[0]
    return top in (META_DIR, ATTEMPTS_DIR)


def files_folder(output_path: str, attempt_folder: str) -> str:
    """The folder holding a build's files: ``attempt_folder`` (relative, as a record names it) of the
    step at ``output_path``, or the step's folder itself for ""."""
    return fs.join(output_path, attempt_folder) if attempt_folder else output_path


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
        return files_folder(self.output_path, record.attempt_folder if record is not None else "")

    def lost(self, token: int) -> str:
        """The record of an attempt that lost lease ``token`` (written by that attempt's runner)."""
        return fs.join(self.meta, f"{LOST_PREFIX}{token:08d}.json")

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

    def write_json(self, path: str, data: dict[str, Any]) -> None:
        # The status record is a progress note: not worth an fsync (rigging.filesystem.atomic_write).
        fs.atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str), durable=path != self.status)

    def write_status(self, state: BuildState, attempt: int, holder: str, *, error: str | None = None,
                     traceback: str | None = None, worker: str | None = None, attempt_folder: str = "") -> None:
        """Record the newest attempt: ``worker`` names its process (``rigging.process.process_identity``),
        ``attempt_folder`` the folder it writes in when it writes apart (:meth:`attempt_folder`)."""
        if state not in _WRITTEN:
            raise ValueError(f"a runner records one of {[s.value for s in _WRITTEN]}, not {state.value!r}")
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
                listed_absent: bool = False, attempt_folder: str = "") -> bool:
        """Write the success record (the step is done from now on); False if one already exists.

        Args:
            content: what the record says of the build's content (its output digest and
                realisation, ``marin.execution.store.realisations``); its other fields are set here.
            listed_absent: a listing of ``.marin/`` just now had no success record
                (``rigging.filesystem.create_if_absent``).
            attempt_folder: the attempt folder holding the build's files (:meth:`attempt_folder`),
                "" for the step's folder.
        """
        record = replace(content or SuccessRecord(), hash=digest, name=name, finished_at=time.time(),
                         manifest_sha256=manifest_digest(manifest), attempt_folder=attempt_folder)
        return fs.create_if_absent(self.success, json.dumps(record.to_json()), listed_absent=listed_absent)
