"""Chat records (format ``marin.tokenized_chat/v1``): token ids with a loss mask and conversation starts.

One record is one training sequence: one conversation, or several packed back to back. Each
token is one little-endian uint32 whose low 30 bits are the token id, bit 31 the loss mask (the
token is a target the loss counts: an assistant token) and bit 30 "a conversation starts here".
Segment ids follow from the start bits (1, 2, … per conversation; 0 marks padding), so the
attention and the loss can stay inside a conversation (see ``levanter.models``).

A window (what the trainer sees) is an int32 array ``[3, window]``: rows ``ids``, ``loss_mask``
and ``segment_ids``, the record padded with id 0, mask 0 and segment 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "CHAT_FORMAT",
    "MAX_CHAT_VOCAB",
    "PREFERENCE_FORMAT",
    "ROW_IDS",
    "ROW_LOSS_MASK",
    "ROW_SEGMENTS",
    "decode_chat_record",
    "encode_chat_record",
    "loss_weights",
    "pad_window",
    "plain_window",
]

CHAT_FORMAT = "marin.tokenized_chat/v1"
PREFERENCE_FORMAT = "marin.tokenized_preference/v1"
"""Preference pairs: each record two conversations in this format, chosen then rejected (``levanter.data.preference``)."""
MAX_CHAT_VOCAB = 1 << 30
"""Token ids must be below this (the two top bits carry the mask and the start flag)."""
ROW_IDS, ROW_LOSS_MASK, ROW_SEGMENTS = 0, 1, 2
_LOSS_BIT = np.uint32(1 << 31)
_START_BIT = np.uint32(1 << 30)
_ID_MASK = np.uint32((1 << 30) - 1)


def encode_chat_record(conversations: Sequence[tuple[Sequence[int], Sequence[int]]]) -> bytes:
    """The record of ``(ids, loss_mask)`` conversations packed in order.

    Raises:
        ValueError: no conversation, an empty one, ids and mask of different lengths, or an id
            outside ``[0, MAX_CHAT_VOCAB)``.
    """
    if not conversations:
        raise ValueError("a chat record needs at least one conversation")
    parts = []
    for ids, mask in conversations:
        ids_a = np.asarray(ids, dtype=np.int64)
        mask_a = np.asarray(mask, dtype=bool)
        if ids_a.shape != mask_a.shape or ids_a.ndim != 1 or not len(ids_a):
            raise ValueError(f"a conversation needs ids and a loss mask of one equal, non-zero length, "
                             f"got {ids_a.shape} and {mask_a.shape}")
        if ids_a.min() < 0 or ids_a.max() >= MAX_CHAT_VOCAB:
            raise ValueError(f"token ids must be in [0, {MAX_CHAT_VOCAB}), got {int(ids_a.min())}..{int(ids_a.max())}")
        word = ids_a.astype(np.uint32) | np.where(mask_a, _LOSS_BIT, np.uint32(0))
        word[0] |= _START_BIT
        parts.append(word)
    return np.concatenate(parts).astype("<u4").tobytes()


def decode_chat_record(record: bytes) -> np.ndarray:
    """``[3, n]`` int32 rows ``ids``, ``loss_mask``, ``segment_ids`` of one record."""
    words = np.frombuffer(record, dtype="<u4")
    out = np.empty((3, len(words)), dtype=np.int32)
    out[ROW_IDS] = words & _ID_MASK
    out[ROW_LOSS_MASK] = (words >> 31) & 1
    out[ROW_SEGMENTS] = np.cumsum((words >> 30) & 1)
    return out


def pad_window(rows: np.ndarray, window: int, where: str = "") -> np.ndarray:
    """``rows`` (``[3, n]``) padded to ``[3, window]`` with zeros (padding: segment 0, no loss).

    Raises:
        ValueError: the record is longer than the window.
    """
    n = rows.shape[1]
    if n > window:
        raise ValueError(f"{where}a chat record of {n} tokens does not fit a window of {window} "
                         f"(seq_len + 1); train with seq_len >= {n - 1} or tokenize with a smaller max_seq_len")
    out = np.zeros((3, window), dtype=np.int32)
    out[:, :n] = rows
    return out


def plain_window(tokens: Any) -> np.ndarray:
    """A window of plain (pretraining) tokens as chat rows: every token counts, one segment."""
    tokens = np.asarray(tokens, dtype=np.int32)
    out = np.ones((3, len(tokens)), dtype=np.int32)
    out[ROW_IDS] = tokens
    return out


def loss_weights(windows: Any) -> Any:
    """Which targets of chat windows ``[b, 3, seq_len + 1]`` count (``[b, seq_len]`` of 0/1, the
    array type of ``windows``, numpy or jax): the mask is on, the target is in the input's segment
    (never across a conversation boundary) and not padding (segment 0)."""
    mask, segments = windows[:, ROW_LOSS_MASK], windows[:, ROW_SEGMENTS]
    return (mask[:, 1:] > 0) & (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)
