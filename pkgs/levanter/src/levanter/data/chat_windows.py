"""Grain iterator over chat records: one record per window, shuffled per epoch, O(1) state."""

from __future__ import annotations

from typing import Any

import grain.python as grain
import numpy as np

from levanter.data.chat import decode_chat_record, pad_window
from levanter.data.tokenized import TokenizedSplit

__all__ = ["ChatIterDataset"]


class ChatIterDataset(grain.IterDataset):
    """Windows ``[3, window]`` (ids, loss mask, segment ids), one chat record each, padded.

    Records are visited in a seeded permutation that changes every epoch (when ``shuffle``); with
    ``repeat`` the stream is endless, otherwise it ends after the last record.
    """

    def __init__(self, split: TokenizedSplit, window: int, *, seed: int, shuffle: bool = True,
                 repeat: bool = True):
        super().__init__()
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.split, self.window, self.seed = split, window, seed
        self.shuffle, self.repeat = shuffle, repeat

    def __iter__(self) -> grain.DatasetIterator:
        return _ChatIterator(self)

    def __str__(self) -> str:
        return f"ChatIterDataset({self.split.path}:{self.split.split}, window={self.window})"


class _ChatIterator(grain.DatasetIterator):
    def __init__(self, ds: ChatIterDataset):
        super().__init__()
        self._ds = ds
        self._n = ds.split.num_documents
        self._epoch, self._index = 0, 0
        self._perm_epoch, self._perm = -1, np.arange(self._n)

    def _order(self, epoch: int) -> np.ndarray:
        if not self._ds.shuffle:
            return self._perm
        if epoch != self._perm_epoch:
            rng = np.random.default_rng([self._ds.seed, epoch])
            self._perm, self._perm_epoch = rng.permutation(self._n), epoch
        return self._perm

    def __next__(self) -> np.ndarray:
        if self._index == self._n:
            if not self._ds.repeat:
                raise StopIteration
            self._epoch, self._index = self._epoch + 1, 0
        record = self._ds.split.source[int(self._order(self._epoch)[self._index])]
        self._index += 1
        return pad_window(decode_chat_record(record), self._ds.window, where=f"{self._ds.split.path}: ")

    def get_state(self) -> dict[str, Any]:
        return {"epoch": int(self._epoch), "index": int(self._index)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._epoch, self._index = int(state["epoch"]), int(state["index"])
