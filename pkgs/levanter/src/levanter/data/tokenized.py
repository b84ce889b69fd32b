"""Reading the output folder of the tokenize step (format ``marin.tokenized/v1``).

Layout: ``<dir>/index.json``, ``<dir>/tokenizer.json`` and ``<dir>/<split>/*.array_record``, one
record per document holding its token ids as little-endian uint32.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile

import grain.python as grain
import numpy as np

from rigging import filesystem as fs

__all__ = ["FORMAT", "TokenizedSplit", "decode_document", "open_split", "read_index"]

FORMAT = "marin.tokenized/v1"


def read_index(path: str) -> dict:
    """Parse and check ``<path>/index.json``.

    Raises:
        FileNotFoundError: there is no index (the folder is not a finished tokenize output).
        ValueError: the index has another format or misses a field.
    """
    index_path = fs.join(path, "index.json")
    if not fs.exists(index_path):
        raise FileNotFoundError(f"{index_path} not found: {path} is not a tokenized dataset folder")
    try:
        index = json.loads(fs.read_text(index_path))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{index_path}: not valid JSON ({e})") from None
    if not isinstance(index, dict):
        raise ValueError(f"{index_path}: expected a JSON object, got {type(index).__name__}")
    if index.get("format") != FORMAT:
        raise ValueError(f"{index_path}: format must be {FORMAT!r}, got {index.get('format')!r}")
    for key in ("vocab_size", "eos_id", "splits"):
        if key not in index:
            raise ValueError(f"{index_path}: missing field {key!r}")
    return index


def decode_document(record: bytes) -> np.ndarray:
    """Token ids of one record (little-endian uint32 bytes) as int32."""
    return np.frombuffer(record, dtype="<u4").astype(np.int32)


@dataclasses.dataclass(frozen=True)
class TokenizedSplit:
    """One split of a tokenized dataset, opened for random access by document."""

    path: str
    """The dataset folder."""
    split: str
    """Split name (``train`` or ``validation``)."""
    vocab_size: int
    """Vocabulary size of the tokenizer that produced the ids."""
    eos_id: int
    """Id placed between packed documents."""
    num_documents: int
    """Number of records over all shards."""
    num_tokens: int
    """Number of tokens over all shards (without separators)."""
    source: grain.ArrayRecordDataSource
    """Grain random-access source over the (local) shard files."""


def _cache_dir_default() -> str:
    return os.path.join(tempfile.gettempdir(), "levanter-shard-cache")


def _local_copy(remote: str, sha256: str | None, cache_dir: str) -> str:
    """Copy a remote shard to ``cache_dir`` once (keyed by content hash) and return its local path.

    array_record cannot be handed gs:// paths reliably (it hangs against the GCS emulator), so
    remote shards are read through fsspec into a local file first.
    """
    key = sha256 or hashlib.sha256(remote.encode()).hexdigest()
    target = os.path.join(cache_dir, f"{key[:32]}-{os.path.basename(remote)}")
    if os.path.exists(target):
        return target
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    digest = hashlib.sha256()
    with fs.open_file(remote, "rb") as src, open(tmp, "wb") as dst:
        while chunk := src.read(1 << 22):
            digest.update(chunk)
            dst.write(chunk)
    if sha256 is not None and digest.hexdigest() != sha256:
        os.unlink(tmp)
        raise ValueError(f"{remote}: sha256 {digest.hexdigest()} does not match the index's {sha256}")
    os.replace(tmp, target)
    return target


def open_split(path: str, split: str, cache_dir: str | None = None) -> TokenizedSplit:
    """Open ``split`` of the tokenized dataset at ``path`` (local or remote).

    Raises:
        KeyError: the index has no such split.
        ValueError: the split holds no tokens.
    """
    index = read_index(path)
    if split not in index["splits"]:
        raise KeyError(f"{path} has no split {split!r} (has {sorted(index['splits'])})")
    meta = index["splits"][split]
    shards = meta.get("shards") or []
    if not shards:
        raise ValueError(f"{path}: split {split!r} lists no shards")
    local_paths = []
    for shard in shards:
        full = fs.join(path, shard["path"])
        if fs.is_local(full):
            local_paths.append(fs.strip_protocol(full))
        else:
            local_paths.append(_local_copy(full, shard.get("sha256"), cache_dir or _cache_dir_default()))
    source = grain.ArrayRecordDataSource(local_paths)
    num_tokens = int(meta.get("tokens", sum(int(s.get("tokens", 0)) for s in shards)))
    if len(source) == 0:
        raise ValueError(f"{path}: split {split!r} has no documents")
    return TokenizedSplit(path=path, split=split, vocab_size=int(index["vocab_size"]),
                          eos_id=int(index["eos_id"]), num_documents=len(source),
                          num_tokens=num_tokens, source=source)
