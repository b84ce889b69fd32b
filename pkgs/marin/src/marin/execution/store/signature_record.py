"""``.marin/signatures.json``: what a cache entry's signers signed, and their signatures.

Written by a push that has a signing key, before the entry's success record; read by a fetch that
has trusted keys (:mod:`marin.execution.store.signing` says what is signed and how it is checked).
An entry may carry several signatures over the one fingerprint: one per key that signed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from marin.execution.store.record_json import RECORD_FORMAT, RecordKey, fields_from, is_dict, is_list, json_of

__all__ = ["EntrySignatures", "Signature"]


@dataclass(frozen=True)
class Signature:
    """One key's signature of an entry's fingerprint."""

    key: str
    """The name of the key that signed (the ``name`` of its ``name:base64``)."""
    sig: str
    """The ed25519 signature of the fingerprint, base64."""

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "sig": self.sig}

    @classmethod
    def from_json(cls, data: Any) -> Signature | None:
        if isinstance(data, dict) and isinstance(data.get("key"), str) and isinstance(data.get("sig"), str):
            return cls(data["key"], data["sig"])
        return None


@dataclass(frozen=True)
class EntrySignatures:
    """``.marin/signatures.json``: the fingerprint the signers signed and each signature over it."""

    signed: dict[str, Any] | None = None
    """The fingerprint's fields as signed (``marin.execution.store.signing.Fingerprint``): a
    reader re-computes them from the entry and says which differ when a signature fails."""
    signatures: tuple[Signature, ...] = ()
    format: int = RECORD_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[RecordKey, ...]] = (RecordKey("signed", "signed", is_dict, always=True),
                                              RecordKey("signatures", "signatures", is_list, always=True))

    def to_json(self) -> dict[str, Any]:
        body = json_of(self, self._KEYS)
        if "signatures" not in self.extra:
            body["signatures"] = [s.to_json() for s in self.signatures]
        return body

    @classmethod
    def from_json(cls, data: Any) -> EntrySignatures | None:
        kwargs = fields_from(data, cls._KEYS)
        if kwargs is None:
            return None
        # An entry that is not {key, sig} can verify nothing: it is left out.
        found = (Signature.from_json(s) for s in kwargs.pop("signatures", None) or ())
        return cls(signatures=tuple(s for s in found if s is not None), **kwargs)

    def by(self, names: set[str]) -> list[Signature]:
        """The signatures made by keys of these names."""
        return [s for s in self.signatures if s.key in names]
