"""``.marin/success.json``: the record whose existence makes a step done, and the digest of the
manifest it carries."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from marin.execution.store.layout import is_attempt_folder
from marin.execution.store.record_json import (
    ATTEMPT_FOLDER_KEY,
    RECORD_FORMAT,
    RecordKey,
    fields_from,
    is_list,
    is_number,
    is_str,
    json_of,
)

__all__ = ["SuccessRecord", "manifest_digest"]


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The digest of a manifest's file list that the success record carries (``manifest_sha256``)."""
    return hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()


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
    """The attempt folder holding its files (:func:`~marin.execution.store.layout.attempt_folder`), ""
    for the step's folder."""
    ttl_s: float | None = None
    """How long after ``finished_at`` the output is worth keeping (the step's ``ttl``); None: for as
    long as a root reaches it."""
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[RecordKey, ...]] = (
        RecordKey("hash", "hash", is_str, always=True), RecordKey("name", "name", is_str, always=True),
        RecordKey("finished_at", "finished_at", is_number, always=True),
        RecordKey("manifest_sha256", "manifest_sha256", is_str, always=True),
        RecordKey("output_digest", "output_digest", is_str),
        RecordKey("realisation_key", "realisation_key", is_str),
        RecordKey("inputs", "inputs", is_list), RecordKey("realised_from", "realised_from", is_str),
        RecordKey("attempt_folder", ATTEMPT_FOLDER_KEY, is_attempt_folder), RecordKey("ttl_s", "ttl_s", is_number))

    def to_json(self) -> dict[str, Any]:
        return json_of(self, self._KEYS)

    @classmethod
    def from_json(cls, data: Any) -> SuccessRecord | None:
        kwargs = fields_from(data, cls._KEYS)
        return cls(**kwargs) if kwargs is not None else None

    def expires_at(self) -> float | None:
        """When the output stops being worth keeping (``finished_at`` + ``ttl_s``), None for never."""
        if self.ttl_s is None or self.finished_at is None:
            return None
        return self.finished_at + self.ttl_s

    def carried(self) -> SuccessRecord:
        """What a copy of this build (fetched from a cache, published elsewhere) keeps: its
        content's digests and inputs; the caller fills in the rest."""
        return SuccessRecord(output_digest=self.output_digest, realisation_key=self.realisation_key,
                             inputs=self.inputs)

    def published_here(self) -> SuccessRecord:
        """The record of a copy of its build whose files sit in the step's folder itself (a
        cache push): the same record without its attempt folder."""
        return replace(self, attempt_folder="",
                       extra={k: v for k, v in self.extra.items() if k != ATTEMPT_FOLDER_KEY})
