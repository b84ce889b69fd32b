"""Grain iterator over chat records: one record per window, shuffled per epoch, O(1) state."""

from __future__ import annotations

from typing import Any

import grain.python as grain
import numpy as np

from levanter.data.chat import decode_chat_record, pad_window
from levanter.data.epochs import EpochOrder, SplitWindowDataset

__all__ = ["ChatIterDataset"]


class ChatIterDataset(SplitWindowDataset):
    """Windows ``[3, window]`` (ids, loss mask, segment ids), one chat record each, padded.

    Records are visited in a seeded permutation that changes every epoch (when ``shuffle``); with
    ``repeat`` the stream is endless, otherwise it ends after the last record.
    """

    def __iter__(self) -> grain.DatasetIterator:
        return _ChatIterator(self)


class _ChatIterator(grain.DatasetIterator):
    def __init__(self, ds: ChatIterDataset):
        super().__init__()
        self._ds = ds
        self._order = EpochOrder(ds)
        self._epoch, self._index = 0, 0

    def __next__(self) -> np.ndarray:
        self._epoch, self._index = self._order.position(self._epoch, self._index)
        record = self._order.record(self._epoch, self._index)
        self._index += 1
        return pad_window(decode_chat_record(record), self._ds.window, where=f"{self._ds.split.path}: ")

    def get_state(self) -> dict[str, Any]:
        return {"epoch": int(self._epoch), "index": int(self._index)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._epoch, self._index = int(state["epoch"]), int(state["index"])
