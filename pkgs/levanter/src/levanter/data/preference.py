"""Preference pairs (format ``marin.tokenized_preference/v1``): a prompt with a chosen and a rejected completion.

A record is a chat record (``levanter.data.chat``) of two conversations, the chosen one first: each
is the prompt followed by its completion, the completion's tokens marked by the loss mask (what a
preference loss scores), the prompt's not. Decoded for a step, a pair is ``[2, 3, window]`` int32:
the chosen and the rejected conversation, each as one chat window (ids, loss mask, segment ids).

Training batches are ``{"pairs": [b, 2, 3, window], "index": [b]}`` (``index``: the record's
position in its split, where a pair's reference log-probs are found), pairs shuffled per epoch
and endless; held-out pairs are read once, in order (:func:`eval_pair_batches`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grain.python as grain
import numpy as np

from levanter.data.chat import ROW_SEGMENTS, decode_chat_record, encode_chat_record, pad_window
from levanter.data.epochs import EpochOrder, SplitWindowDataset
from levanter.data.tokenized import TokenizedSplit, open_split

__all__ = ["PairIterDataset", "decode_pair", "encode_pair", "eval_pair_batches", "iter_pair_batches", "pair_batches"]


def encode_pair(chosen: tuple[list[int], list[int]], rejected: tuple[list[int], list[int]]) -> bytes:
    """The record of a pair: ``(ids, loss_mask)`` of the chosen and of the rejected conversation."""
    return encode_chat_record([chosen, rejected])


def decode_pair(record: bytes, window: int, where: str = "") -> np.ndarray:
    """``[2, 3, window]`` int32 of a pair record: the chosen and the rejected conversation, each padded.

    Raises:
        ValueError: the record does not hold exactly two conversations, or one does not fit ``window``.
    """
    rows = decode_chat_record(record)
    segments = rows[ROW_SEGMENTS]
    if segments.size == 0 or int(segments[-1]) != 2:
        raise ValueError(f"{where}a preference record must hold two conversations (chosen, rejected), "
                         f"got {int(segments[-1]) if segments.size else 0}")
    out = np.empty((2, 3, window), dtype=np.int32)
    for side in (0, 1):
        part = rows[:, segments == side + 1].copy()
        part[ROW_SEGMENTS] = 1
        out[side] = pad_window(part, window, where)
    return out


class PairIterDataset(SplitWindowDataset):
    """``{"pairs": [2, 3, window], "index": record position}`` per record of a preference split."""

    def __iter__(self) -> grain.DatasetIterator:
        return _PairIterator(self)


class _PairIterator(grain.DatasetIterator):
    def __init__(self, ds: PairIterDataset):
        super().__init__()
        self._ds = ds
        self._order = EpochOrder(ds)
        self._epoch, self._index = 0, 0

    def __next__(self) -> dict[str, np.ndarray]:
        self._epoch, self._index = self._order.position(self._epoch, self._index)
        at = self._order.record_index(self._epoch, self._index)
        self._index += 1
        pairs = decode_pair(self._ds.split.source[at], self._ds.window, where=f"{self._ds.split.path}: ")
        return {"pairs": pairs, "index": np.int64(at)}

    def get_state(self) -> dict[str, Any]:
        return {"epoch": int(self._epoch), "index": int(self._index)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._epoch, self._index = int(state["epoch"]), int(state["index"])


class _Attach(grain.MapTransform):
    """Put each pair's reference log-probs (``[2]``: chosen, rejected) beside it, by its index."""

    def __init__(self, reference: np.ndarray | None, rows: slice | None):
        self.reference, self.rows = reference, rows

    def map(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {"pairs": batch["pairs"]}
        if self.reference is not None:
            out["reference"] = self.reference[batch["index"]].astype(np.float32)
        if self.rows is not None:
            out = {k: np.ascontiguousarray(v[self.rows]) for k, v in out.items()}
        return out


def pair_batches(path: str, *, window: int, batch_size: int, seed: int, reference: np.ndarray | None,
                 prefetch: int = 4, cache_dir: str | None = None, rows: slice | None = None) -> grain.IterDataset:
    """Endless batches of the ``train`` pairs of the preference dataset at ``path``, shuffled per epoch:
    ``{"pairs": [b, 2, 3, window]}`` and, with ``reference`` (``[pairs, 2]``, by record), ``"reference": [b, 2]``.

    ``rows`` keeps this process's rows of every batch; the iterator's state is the position in the stream.
    """
    split = open_split(path, "train", cache_dir)
    batched = PairIterDataset(split, window, seed=seed, shuffle=True, repeat=True).batch(batch_size, drop_remainder=True)
    batched = batched.map(_Attach(reference, None if rows is None or (rows.start or 0, rows.stop) == (0, batch_size)
                                  else rows))
    if prefetch > 0:
        batched = grain.experimental.ThreadPrefetchIterDataset(batched, prefetch_buffer_size=prefetch)
    return batched


def iter_pair_batches(path: str, split: str, *, window: int, batch_size: int, max_pairs: int | None = None,
                      reference: np.ndarray | None = None, cache_dir: str | None = None
                      ) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """The first ``max_pairs`` pairs of ``split`` in stored order (all of them with None), as
    ``(batch, real)``: batches of ``batch_size`` (the last filled up with repeats of its first pair)
    and how many of the batch's pairs are real. Nothing when the dataset has no such split.
    """
    try:
        opened: TokenizedSplit = open_split(path, split, cache_dir)
    except KeyError:
        return
    count = opened.num_documents if max_pairs is None else min(max_pairs, opened.num_documents)
    it: Iterator[dict[str, Any]] = iter(PairIterDataset(opened, window, seed=0, shuffle=False, repeat=False))
    attach = _Attach(reference, None)
    for start in range(0, count, batch_size):
        items = [next(it) for _ in range(min(batch_size, count - start))]
        real = len(items)
        items += [items[0]] * (batch_size - real)
        yield attach.map({k: np.stack([x[k] for x in items]) for k in ("pairs", "index")}), real


def eval_pair_batches(path: str, split: str, *, window: int, batch_size: int, max_pairs: int | None,
                      reference: np.ndarray | None, cache_dir: str | None = None
                      ) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """:func:`iter_pair_batches` held in memory: the batches, and how many pairs of each are real."""
    batches, real = [], []
    for batch, n in iter_pair_batches(path, split, window=window, batch_size=batch_size, max_pairs=max_pairs,
                                      reference=reference, cache_dir=cache_dir):
        batches.append(batch)
        real.append(n)
    return batches, real
