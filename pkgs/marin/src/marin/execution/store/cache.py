"""Binary caches in the manner of Nix substituters: read-only prefixes looked up by hash.

A cache is another prefix (local folder, ``gs://``, ``memory://``) holding finished step
outputs at the same ``<name>-<hash16>`` paths. A hit is copied into the local prefix, verified
against its manifest, and only then marked done; a partial or corrupt entry is refused, and so is
one holding anything its manifest does not list or a name that leaves its folder
(:mod:`marin.execution.store.entry_files`): exactly the manifest's files and the known records
are copied. Publishing (:func:`push_output`) copies those files first and the success record
last, so a half-pushed entry never looks finished.

With a signing key, a push signs the entry (``.marin/signatures.json``, before the success record);
with trusted keys, a fetch takes only an entry one of them signed, checked before a byte of its
files is copied and held to what was checked afterwards (:mod:`marin.execution.store.signing`):
its files by the manifest, its provenance and log by their signed digests. An entry signed before
signatures covered those two is fetched without them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marin.execution.store.entry_files import (
    SIGNED_RECORDS,
    TRAVELLING_RECORDS,
    EntryIncomplete,
    EntryRefused,
    entry_copies,
    name_problem,
)
from marin.execution.store.layout import ATTEMPTS_DIR, META_DIR
from marin.execution.store.manifest import clear_output, verify_manifest
from marin.execution.store.signature_record import EntrySignatures
from marin.execution.store.signing import Fingerprint, PublicKey, SecretKey, refusal, sign
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs

__all__ = ["CacheMiss", "copy_tree", "find_in_caches", "push_output", "sign_cached", "substitute"]

logger = logging.getLogger(__name__)

class CacheMiss(Exception):
    """A cache entry exists but cannot be used; the message says why."""


@dataclass(frozen=True)
class CacheHit:
    """A finished output found in a cache."""

    cache: str
    path: str
    output_name: str = ""
    """The output name it is found under (``<name>-<hash16>``)."""


def find_in_caches(output_name: str, caches: Sequence[str]) -> CacheHit | None:
    """The first cache holding a finished ``output_name``, or None."""
    for cache in caches:
        path = fs.join(cache.rstrip("/"), output_name)
        if StepRecord(path).is_done():
            return CacheHit(cache, path, output_name)
        if fs.exists(path):
            # Files without a success record: a push that was cut off, or one still under way.
            logger.warning("cache entry %s has no success record (interrupted or ongoing push); not using it", path)
    return None


def copy_tree(src: str, dst: str, *, skip_success: bool = True, records: bool = True, link: bool = False) -> int:
    """Copy every file of ``src`` into ``dst`` (streamed); returns how many files it copied or linked.

    The build's files come from where ``src``'s success record says they are (an attempt folder,
    :mod:`marin.execution.store.layout`) and land in ``dst`` itself; other attempt folders never
    travel. The success record is left out unless asked for: callers write it last;
    ``records=False`` leaves out every record (``.marin/``), for an output made from another
    step's files. With ``link``, files of a local ``src`` are hard-linked into a local ``dst``
    where the file system allows (finished outputs are never written in place: records are
    replaced by renames), else copied.
    """
    success = StepRecord(src).read_success()
    data = success.attempt_folder if success is not None else ""
    moves = []
    for rel, _size in fs.walk_files(src):
        top = rel.split("/", 1)[0]
        if top == ATTEMPTS_DIR:
            if data and rel.startswith(data + "/"):
                moves.append((rel, rel[len(data) + 1:]))
        elif top == META_DIR:
            travels = rel.count("/") == 1 and rel[len(META_DIR) + 1:] in TRAVELLING_RECORDS
            if records and (travels or (not skip_success and rel == f"{META_DIR}/success.json")):
                moves.append((rel, rel))
        elif not data:
            moves.append((rel, rel))
    for _rel, to in moves:
        why = name_problem(to) if not to.startswith(META_DIR + "/") else None
        if why is not None:
            raise ValueError(f"{src}: file {to!r}: {why}")
    return _copy_files(src, dst, moves, link=link)


def _copy_files(src: str, dst: str, moves: Sequence[tuple[str, str]], *, link: bool = False) -> int:
    """Copy each ``(path in src, path in dst)`` of ``moves`` (names already checked); returns how many."""
    local = fs.is_local(src) and fs.is_local(dst)
    for rel, to in moves:
        if local:
            fs.copy_file(fs.join(src, rel), fs.join(dst, to), link=link)  # replaces what a cut-off attempt left
            continue
        with fs.open_file(fs.join(src, rel), "rb") as fin, fs.open_file(fs.join(dst, to), "wb") as fout:
            while chunk := fin.read(1 << 22):
                fout.write(chunk)
    return len(moves)


def substitute(hit: CacheHit, dst: str, *, link: bool = False, trusted: Sequence[PublicKey] = (),
               step_hash: str | None = None) -> tuple[dict[str, Any], SuccessRecord]:
    """Copy a cache hit into ``dst`` and verify it; raise :class:`CacheMiss` (and clean up) if bad.

    The caller holds ``dst``'s lease and writes the success record afterwards. ``link``: hard-link
    local files instead of copying them (see :func:`copy_tree`). With ``trusted`` keys the entry
    must carry a signature by one of them over its fingerprint for ``step_hash``
    (:func:`marin.execution.store.signing.refusal`); it is checked before anything is copied, and
    the copy is then held to the manifest and signatures that were checked.

    Returns:
        The entry's manifest and success record, as checked.
    """
    src_record = StepRecord(hit.path)
    manifest = src_record.read_json(src_record.manifest)
    success = src_record.read_success()
    if manifest is None or success is None:
        raise CacheMiss(f"cache entry {hit.path} has no readable manifest or success record")
    signatures, claimed = None, None
    if trusted:
        if step_hash is None:
            raise ValueError("checking a cache entry's signature needs the step's hash")
        signatures = src_record.read_signatures()
        # The records' digests as signed: the signature checks them, the copy is held to them.
        claimed = _claimed_records(signatures)
        why = refusal(Fingerprint.of(hit.output_name, step_hash, manifest, success, claimed), signatures, trusted)
        if why is not None:
            raise CacheMiss(f"cache entry {hit.output_name} from {hit.cache} refused: {why}")
    try:
        moves = entry_copies(hit.path, manifest, success)
        if trusted and claimed is None:  # signed before records were covered: only what it covers travels
            moves = [m for m in moves if m[1] not in {f"{META_DIR}/{name}" for name in SIGNED_RECORDS}]
    except EntryIncomplete as e:
        raise CacheMiss(f"cache entry {hit.path} does not match its manifest ({e})") from None
    except EntryRefused as e:
        raise CacheMiss(f"cache entry {hit.output_name} from {hit.cache} refused: {e}") from None
    try:
        clear_output(dst)  # what a cut-off attempt left would be published with the entry's files
        _copy_files(hit.path, dst, moves, link=link)
    except (OSError, ValueError) as e:
        clear_output(dst)
        raise CacheMiss(f"copying cache entry {hit.path} failed: {e}") from e
    fetched = StepRecord(dst)
    if fetched.read_json(fetched.manifest) != manifest or (trusted and fetched.read_signatures() != signatures):
        clear_output(dst)
        raise CacheMiss(f"cache entry {hit.path} changed while it was copied (its manifest or signatures)")
    altered = [] if claimed is None else [name for name, digest in _record_digests(dst).items()
                                          if claimed.get(name) != digest]
    if altered:
        clear_output(dst)
        raise CacheMiss(f"cache entry {hit.output_name} from {hit.cache} refused: its {' and '.join(altered)} "
                        "changed after signing")
    problems = verify_manifest(dst, manifest)
    if problems:
        clear_output(dst)
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CacheMiss(f"cache entry {hit.path} does not match its manifest ({shown})")
    return manifest, success


def push_output(src: str, cache: str, output_name: str, *, signing_key: SecretKey | None = None) -> bool:
    """Publish a finished output to ``cache``; False when the cache already has it.

    Files first, the manifest and provenance with them, then (with ``signing_key``) the entry's
    signatures, the success record last.
    """
    src_record = StepRecord(src)
    if not src_record.is_done():
        raise CacheMiss(f"{src} is not a finished step output")
    dst = fs.join(cache.rstrip("/"), output_name)
    dst_record = StepRecord(dst)
    if dst_record.is_done():
        return False
    manifest = src_record.read_json(src_record.manifest)
    if manifest is not None:
        problems = verify_manifest(src_record.files_folder(), manifest)
        if problems:
            raise CacheMiss(f"{src} changed since it was built ({problems[0]}); not pushing")
    success = src_record.read_success()
    if success is None:
        raise CacheMiss(f"{src}: its success record is unreadable; not pushing")
    signatures = None
    if signing_key is not None:
        signatures = sign(_fingerprint(src, output_name, manifest, success), signing_key,
                          src_record.read_signatures())
    try:
        moves = entry_copies(src, manifest, success, strict=False) if manifest is not None else None
    except EntryRefused as e:
        raise CacheMiss(f"{src}: {e}; not pushing") from None
    if moves is None:
        copy_tree(src, dst)  # an output without a manifest (built before manifests were written)
    else:
        _copy_files(src, dst, moves)
    if signatures is not None:
        dst_record.write_json(dst_record.signatures, signatures.to_json())
    fs.create_if_absent(dst_record.success, json.dumps(success.published_here().to_json()))
    return True


def sign_cached(src: str, cache: str, output_name: str, signing_key: SecretKey) -> bool:
    """Add ``signing_key``'s signature to the entry ``cache`` already holds of the build at ``src``
    (as ``nix store sign`` does: after a new key is configured, entries pushed before are signed
    with it too); False when the entry carries a valid signature by that key already.

    Raises:
        CacheMiss: the cache's entry is not the same build (its fingerprint differs): it is not signed.
    """
    src_record, dst_record = StepRecord(src), StepRecord(fs.join(cache.rstrip("/"), output_name))
    success = src_record.read_success()
    if success is None:
        raise CacheMiss(f"{src}: its success record is unreadable; not signing")
    ours = _fingerprint(src, output_name, src_record.read_json(src_record.manifest), success)
    their_manifest, their_success = dst_record.read_json(dst_record.manifest), dst_record.read_success()
    if their_manifest is None or their_success is None:
        raise CacheMiss(f"cache entry {dst_record.output_path} has no readable manifest or success record; not signing")
    theirs = Fingerprint.of(output_name, ours.hash, their_manifest, their_success, _record_digests(dst_record.output_path))
    differs = ours.differences(theirs.to_json())
    if differs:
        raise CacheMiss(f"cache entry {dst_record.output_path} is another build than the one at {src} (they differ "
                        f"in: {', '.join(differs)}); not signing it")
    carried = dst_record.read_signatures()
    if refusal(ours, carried, (signing_key.public(),)) is None:
        return False
    dst_record.write_json(dst_record.signatures, sign(ours, signing_key, carried).to_json())
    return True


def _fingerprint(src: str, output_name: str, manifest: dict[str, Any] | None, success: SuccessRecord) -> Fingerprint:
    """The fingerprint of the build at ``src`` for signing; CacheMiss when it has no manifest or hash."""
    if manifest is None or success.hash is None:
        raise CacheMiss(f"{src} has no readable manifest or step hash; it cannot be signed")
    return Fingerprint.of(output_name, success.hash, manifest, success, _record_digests(src))


def _record_digests(path: str) -> dict[str, str | None]:
    """The SHA-256 of each record of the build at ``path`` that a signature covers (None: it has none)."""
    found: dict[str, str | None] = {}
    for name in SIGNED_RECORDS:
        try:
            found[name] = fs.sha256_of(fs.join(path, META_DIR, name))
        except FileNotFoundError:
            found[name] = None
    return found


def _claimed_records(signatures: EntrySignatures | None) -> dict[str, str | None] | None:
    """The records' digests an entry's signatures record says were signed; None: it says none (a
    signature of format 1), or not in the form a signer writes (then no signature verifies)."""
    signed = signatures.signed if signatures is not None else None
    claimed = signed.get("records") if isinstance(signed, dict) else None
    if not isinstance(claimed, dict) or not all(isinstance(v, str | None) for v in claimed.values()):
        return None
    return claimed
