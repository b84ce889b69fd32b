"""Reading a tokenized dataset (format ``marin.tokenized/v1``, see :mod:`zephyr.shards`).

Layout: ``<dir>/index.json``, ``<dir>/tokenizer.json`` and ``<dir>/<split>/*.array_record``, one
record per document holding its token ids as little-endian uint32. The index, the record format
and the local copy of remote shards belong to :mod:`zephyr.shards`; this module opens a split of
such a folder as a Grain source.
"""

from __future__ import annotations

import dataclasses

import grain.python as grain
import numpy as np

from levanter.data.chat import CHAT_FORMAT, PREFERENCE_FORMAT
from rigging import filesystem as fs
from zephyr import DataError
from zephyr.shards import TOKENIZED_FORMAT, decode_tokens, local_shard
from zephyr.shards import read_index as _read_shard_index

__all__ = ["FORMAT", "FORMATS", "TokenizedSplit", "decode_document", "open_split", "read_index"]

FORMAT = TOKENIZED_FORMAT
FORMATS = (FORMAT, CHAT_FORMAT, PREFERENCE_FORMAT)
"""Formats the loader reads: plain documents, chat records (``levanter.data.chat``), and preference
pairs (``levanter.data.preference``; read by preference training only)."""


def read_index(path: str) -> dict:
    """``<path>/index.json`` of a tokenized dataset, parsed and checked.

    Raises:
        zephyr.DataError: there is no index (not a finished tokenize output), or it has another
            format, misses ``vocab_size``, ``eos_id`` or ``splits``, or lists malformed shards.
    """
    index = _read_shard_index(path, required=("vocab_size", "eos_id", "splits"))
    if index.get("format") not in FORMATS:
        raise DataError(fs.join(path, "index.json"), "", f"format must be one of {', '.join(map(repr, FORMATS))}, "
                                                         f"got {index.get('format')!r}")
    return index


def decode_document(record: bytes) -> np.ndarray:
    """Token ids of one record (little-endian uint32 bytes) as int32."""
    return decode_tokens(record).astype(np.int32)


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
    format: str = FORMAT
    """The index's format: plain documents or chat records."""

    @property
    def is_chat(self) -> bool:
        """Whether records are chat records (ids with a loss mask and conversation starts)."""
        return self.format == CHAT_FORMAT


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
    local_paths = [local_shard(fs.join(path, shard["path"]), shard["sha256"], cache_dir) for shard in shards]
    source = grain.ArrayRecordDataSource(local_paths)
    num_tokens = int(meta.get("tokens", sum(int(s.get("tokens", 0)) for s in shards)))
    if len(source) == 0:
        raise ValueError(f"{path}: split {split!r} has no documents")
    return TokenizedSplit(path=path, split=split, vocab_size=int(index["vocab_size"]),
                          eos_id=int(index["eos_id"]), num_documents=len(source),
                          num_tokens=num_tokens, source=source, format=str(index["format"]))
