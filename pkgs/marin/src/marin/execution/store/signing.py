"""Signed cache entries: ed25519 keys written as Nix writes them, what a signature covers, signing
an entry and checking one.

Keys are ``name:base64`` strings, as ``nix key generate-secret`` and ``nix key
convert-secret-to-public`` write them: a secret key holds 64 bytes (the 32-byte seed, then the
public key, libsodium's layout), a public key 32. A key's name travels with each signature, so a
reader knows which of its trusted keys to check it with, and several keys may be trusted at
once (key rotation).

A signature covers an entry's :class:`Fingerprint`: its output name and step hash, the digest of
its manifest (every file's path, size and SHA-256), its output digest, its realisation (key and
inputs) and the digests of the records that travel with it (its provenance, which the plan's
code-change detection reads, and its log). A fetch re-computes the fingerprint from the entry it
fetched and accepts the entry only when a trusted key signed exactly that. A signature made before
records were covered (format 1) still verifies; the entry is then fetched without them.

``cryptography`` is imported only to make a key, sign or check a signature.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from marin.execution.store.signature_record import EntrySignatures, Signature
from marin.execution.store.success_record import SuccessRecord, manifest_digest
from rigging.config.discovery import bad_setting

__all__ = ["BadKey", "Fingerprint", "PublicKey", "SecretKey", "read_secret_key", "refusal", "sign",
           "signing_key", "trusted_keys", "write_secret_key"]

KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""What a key's name may be: it is written before the ``:`` of the key, and in lists of keys
separated by commas."""
_PUBLIC_BYTES, _SECRET_BYTES = 32, 64
_FINGERPRINT_FORMAT = "marin-cache-entry/1"
_RECORDS_FORMAT = "marin-cache-entry/2"
"""The format tag of a fingerprint that covers the entry's records (:attr:`Fingerprint.records`)."""


class BadKey(ValueError):
    """A key string or file that is not a usable ed25519 key; the message says why (and never
    holds secret bytes)."""


def _ed25519() -> Any:
    # Deferred: only making a key, signing and checking need it.
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _split(text: str, what: str) -> tuple[str, bytes]:
    """(name, bytes) of a ``name:base64`` key; BadKey naming at most the key's name."""
    name, colon, data = text.strip().partition(":")
    if not colon or not KEY_NAME.fullmatch(name):
        raise BadKey(f"not a {what} written name:base64 (as `marin cache keygen` writes keys)")
    try:
        return name, base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadKey(f"the {what} named {name!r} is not base64 after its name") from None


@dataclass(frozen=True)
class PublicKey:
    """A public key: ``name:base64(32 bytes)``; it checks the signatures made under its name."""

    name: str
    key: bytes = field(repr=False)

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """The public key written ``text``.

        Raises:
            BadKey: not ``name:base64`` of 32 bytes (a secret key given as public is named so).
        """
        name, raw = _split(text, "public key")
        if len(raw) == _SECRET_BYTES:
            raise BadKey(f"the key named {name!r} is a secret key, not a public key: keep it secret and give its "
                         "public key (`marin cache public-key FILE` prints it)")
        if len(raw) != _PUBLIC_BYTES:
            raise BadKey(f"the key named {name!r} is not an ed25519 public key ({len(raw)} bytes, not {_PUBLIC_BYTES})")
        return cls(name, raw)

    def __str__(self) -> str:
        return f"{self.name}:{_b64(self.key)}"

    def verifies(self, signature: Signature, message: bytes) -> bool:
        """True when ``signature`` is this key's (by name) and a valid signature of ``message``."""
        if signature.key != self.name:
            return False
        from cryptography.exceptions import InvalidSignature

        try:
            sig = base64.b64decode(signature.sig, validate=True)
            _ed25519().Ed25519PublicKey.from_public_bytes(self.key).verify(sig, message)
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


@dataclass(frozen=True)
class SecretKey:
    """A secret key: ``name:base64(64 bytes)``, the seed then the public key. Its text is written only
    by :func:`write_secret_key`; ``repr`` and errors never show it."""

    name: str
    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> SecretKey:
        """A new random key named ``name``.

        Raises:
            BadKey: ``name`` is not a key name (letters, digits, ``.``, ``_``, ``+``, ``-``).
        """
        if not KEY_NAME.fullmatch(name):
            raise BadKey(f"a key's name is letters, digits, '.', '_', '+' and '-', got {name!r}")
        seed = _ed25519().Ed25519PrivateKey.generate().private_bytes_raw()
        return cls(name, seed + cls._public_of(seed))

    @classmethod
    def parse(cls, text: str) -> SecretKey:
        """The secret key written ``text``.

        Raises:
            BadKey: not ``name:base64`` of 64 bytes whose second half is the first's public key.
        """
        name, raw = _split(text, "secret key")
        if len(raw) == _PUBLIC_BYTES:
            raise BadKey(f"the key named {name!r} is a public key, not a secret key: sign with the file "
                         "`marin cache keygen` wrote")
        if len(raw) != _SECRET_BYTES or cls._public_of(raw[:32]) != raw[32:]:
            raise BadKey(f"the key named {name!r} is not an ed25519 secret key")
        return cls(name, raw)

    @staticmethod
    def _public_of(seed: bytes) -> bytes:
        return _ed25519().Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()

    def public(self) -> PublicKey:
        return PublicKey(self.name, self.secret[32:])

    def sign(self, message: bytes) -> Signature:
        return Signature(self.name, _b64(_ed25519().Ed25519PrivateKey.from_private_bytes(self.secret[:32]).sign(message)))


def read_secret_key(path: str) -> SecretKey:
    """The secret key in the file ``path``.

    Raises:
        BadKey: the file is missing, unreadable or holds no secret key (the message names it).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise BadKey(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadKey(f"{path}: unreadable ({type(e).__name__})") from None
    try:
        return SecretKey.parse(text)
    except BadKey as e:
        raise BadKey(f"{path}: {e}") from None


def write_secret_key(path: str, key: SecretKey) -> None:
    """Write ``key`` to a new file ``path``, readable by its owner only (its folder made if missing).

    Raises:
        FileExistsError: ``path`` exists (a key is never overwritten).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        # No newline after it, as Nix writes its key files.
        f.write(f"{key.name}:{_b64(key.secret)}")


def signing_key(path: str | None, where: str) -> SecretKey | None:
    """The configured ``cache_signing_key`` (``path``, from the source ``where``), or None.

    Raises:
        ConfigError: the file is missing or holds no secret key, naming the setting and its source.
    """
    if path is None:
        return None
    try:
        return read_secret_key(path)
    except BadKey as e:
        raise bad_setting("cache_signing_key", where, str(e)) from None


def trusted_keys(keys: Sequence[str | PublicKey], where: str) -> tuple[PublicKey, ...]:
    """The configured ``cache_trusted_keys`` (from the source ``where``), those given as text parsed.

    Raises:
        ConfigError: one is not a public key, naming the setting and its source.
    """
    try:
        return tuple(k if isinstance(k, PublicKey) else PublicKey.parse(k) for k in keys)
    except BadKey as e:
        raise bad_setting("cache_trusted_keys", where, str(e)) from None


@dataclass(frozen=True)
class Fingerprint:
    """What a signature of a cache entry covers."""

    output: str
    """The entry's output name, ``<step name>-<hash16>``."""
    hash: str
    """The step's full hash."""
    manifest_sha256: str
    """The digest of its manifest (``marin.execution.store.success_record.manifest_digest``)."""
    output_digest: str | None
    realisation_key: str | None
    inputs: list[dict[str, Any]] | None
    records: dict[str, str | None] | None = None
    """The SHA-256 of each record that travels with the entry beside its manifest (its provenance
    and its log, ``marin.execution.store.entry_files.SIGNED_RECORDS``; None for one it lacks); None:
    a fingerprint of format 1, made before records were covered."""

    @classmethod
    def of(cls, output_name: str, step_hash: str, manifest: Mapping[str, Any], success: SuccessRecord,
           records: Mapping[str, str | None] | None = None) -> Fingerprint:
        """The fingerprint of a build of ``output_name`` (whose step hash is ``step_hash``) with this
        manifest and success record, and these digests of its records (None: format 1)."""
        return cls(output_name, step_hash, manifest_digest(dict(manifest)), success.output_digest,
                   success.realisation_key, success.inputs, dict(records) if records is not None else None)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        if self.records is None:
            del body["records"]  # format 1, as signed before records were covered
        return body

    def message(self) -> bytes:
        """The bytes a key signs: a format tag, then the fields as canonical JSON."""
        body = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return f"{_FINGERPRINT_FORMAT if self.records is None else _RECORDS_FORMAT}\n{body}".encode("ascii")

    def differences(self, signed: Mapping[str, Any] | None) -> list[str]:
        """The fields (in words) in which the fingerprint recorded as signed differs from this one."""
        if signed is None:
            return []
        mine = self.to_json()
        return [_FIELD_WORDS[k] for k in _FIELD_WORDS if signed.get(k) != mine.get(k)]


_FIELD_WORDS = {"output": "output name", "hash": "step hash", "manifest_sha256": "manifest",
                "output_digest": "output digest", "realisation_key": "realisation key", "inputs": "inputs",
                "records": "provenance or log"}


def sign(fingerprint: Fingerprint, key: SecretKey, carried: EntrySignatures | None = None) -> EntrySignatures:
    """The signatures record of an entry signed by ``key``: with the signatures it carried already
    (``carried``, from where it was copied) by other keys over the same fingerprint; those over
    another fingerprint (a copy of an earlier build) are dropped."""
    kept = () if carried is None or carried.signed != fingerprint.to_json() else \
        tuple(s for s in carried.signatures if s.key != key.name)
    return EntrySignatures(fingerprint.to_json(), (*kept, key.sign(fingerprint.message())))


def refusal(fingerprint: Fingerprint, record: EntrySignatures | None, trusted: Sequence[PublicKey]) -> str | None:
    """None when one of ``trusted`` signed ``fingerprint`` (as re-computed from the entry); else why
    the entry is refused, in a few words: not signed, signed only by other keys, or a trusted key's
    signature that does not match it (and which of its fields changed after signing)."""
    names = ", ".join(k.name for k in trusted)
    if record is None or not record.signatures:
        return f"not signed (trusted keys: {names})"
    message = fingerprint.message()
    if any(k.verifies(s, message) for s in record.signatures for k in trusted):
        return None
    by_trusted = record.by({k.name for k in trusted})
    if not by_trusted:
        others = ", ".join(sorted({s.key for s in record.signatures}))
        return f"signed only by keys that are not trusted ({others}; trusted keys: {names})"
    changed = fingerprint.differences(record.signed)
    why = (f"its {', '.join(changed)} changed after signing" if changed
           else "not a valid signature of it (made by another key of that name, or the entry was altered)")
    return f"the signature by {by_trusted[0].key} does not match the entry: {why}"

