"""``.marin/provenance.json``: what a build was made from, where and when, and what it made.

``marin.execution.run.provenance`` fills it in for a build; this module is how it is stored.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from marin.execution.store.record_json import (
    RECORD_FORMAT,
    RecordKey,
    fields_from,
    is_bool,
    is_dict,
    is_int,
    is_list,
    is_number,
    is_str,
    json_of,
)

if TYPE_CHECKING:
    from marin.execution.store.code_record import CodeDigest
    from marin.execution.store.sources import SourceFingerprint

__all__ = ["Dependency", "Provenance", "RealisedFrom"]


@dataclass(frozen=True)
class Dependency:
    """A step a build read, as its provenance records it."""

    name: str
    hash: str
    path: str
    """Its output folder when the build ran."""


def _is_dependencies(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(d, dict) and set(d) == {"name", "hash", "path"} and all(isinstance(v, str) for v in d.values())
        for d in value)


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
            and is_number(value["copied_in_s"]))


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
    """Records of earlier attempts that lost their lease
    (:meth:`~marin.execution.store.step_record.StepRecord.write_lost`)."""
    nondeterminism: dict[str, Any] | None = None
    realised_from: RealisedFrom | None = None
    """The earlier build of the same inputs it was copied from."""
    sources: list[Any] | None = None
    """What the sources it read held (``SourceFingerprint.to_json()`` each,
    :mod:`marin.execution.store.sources`)."""
    code: dict[str, Any] | None = None
    """The digest of the code it ran (``CodeDigest.to_json()``, :mod:`marin.execution.store.code_digest`)."""
    incremental: dict[str, Any] | None = None
    """A build that reused an earlier build's per-file outputs: ``{"files_reused": N, "files_processed": M}``."""
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[RecordKey, ...]] = (
        *(RecordKey(a, a, is_str, always=True) for a in ("name", "hash", "version", "fn")),
        RecordKey("config", "config", lambda v: True, always=True),
        RecordKey("config_flat", "config_flat", is_dict, always=True),
        RecordKey("dependencies", "dependencies", _is_dependencies, always=True),
        RecordKey("environment", "environment", is_dict, always=True),
        RecordKey("env_digest", "env_digest", is_str, always=True),
        RecordKey("strict_env", "strict_env", is_bool, always=True),
        RecordKey("host", "host", is_str, always=True), RecordKey("runner", "runner", is_str, always=True),
        *(RecordKey(a, a, is_number, always=True) for a in ("started_at", "finished_at", "duration_s")),
        RecordKey("attempts", "attempts", is_int, always=True),
        RecordKey("retries", "retries", is_int, always=True),
        RecordKey("client", "client", is_str, always=True),
        RecordKey("resources", "resources", is_str, always=True),
        RecordKey("reasons", "reasons", is_list, always=True),
        RecordKey("worker", "worker", lambda v: True, always=True),
        RecordKey("output_bytes", "output_bytes", is_int, always=True),
        RecordKey("output_files", "output_files", is_int, always=True),
        RecordKey("lost_attempts", "lost_attempts", is_list),
        RecordKey("nondeterminism", "nondeterminism", is_dict),
        RecordKey("realised_from", "realised_from", _is_realised_from),
        RecordKey("sources", "sources", is_list),
        RecordKey("code", "code", is_dict),
        RecordKey("incremental", "incremental", is_dict))

    def to_json(self) -> dict[str, Any]:
        body = json_of(self, self._KEYS)
        if "dependencies" not in self.extra:
            body["dependencies"] = [{"name": d.name, "hash": d.hash, "path": d.path} for d in self.dependencies]
        if self.realised_from is not None and "realised_from" not in self.extra:
            body["realised_from"] = self.realised_from.to_json()
        return body

    @classmethod
    def from_json(cls, data: Any) -> Provenance | None:
        kwargs = fields_from(data, cls._KEYS)
        if kwargs is None:
            return None
        if "dependencies" in kwargs:
            kwargs["dependencies"] = tuple(Dependency(**d) for d in kwargs["dependencies"] or ())
        if "realised_from" in kwargs:
            kwargs["realised_from"] = RealisedFrom(**kwargs["realised_from"])
        return cls(**kwargs)

    def code_digest(self) -> str | None:
        """The digest of the code the build ran, as recorded; None when it records none or one that
        does not read back (never equal to a code's digest)."""
        built = self.built_code()
        return built.digest if built is not None else None

    def built_code(self) -> CodeDigest | None:
        """The code the build ran and the environment it ran on
        (:class:`~marin.execution.store.code_record.CodeDigest`), as recorded; None when it records
        none or one that does not read back."""
        # Not at import: records are read on every plan; code digests only where code is compared.
        from marin.execution.store.code_record import CodeDigest

        if self.code is None:
            return None
        try:
            return CodeDigest.from_json(self.code)
        except (KeyError, TypeError, ValueError):
            return None

    def source_fingerprints(self) -> list[SourceFingerprint]:
        """The sources it read, as recorded (entries that do not parse are left out)."""
        # Not at import: records are read on every plan; sources only by steps that read some.
        from marin.execution.store.sources import SourceFingerprint

        out = []
        for entry in self.sources or ():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.append(SourceFingerprint.from_json(entry))
        return out

    def dependency_paths(self) -> dict[str, str]:
        """``{hash: output folder}`` of the dependencies it records."""
        return {d.hash: d.path for d in self.dependencies}
