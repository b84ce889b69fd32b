"""Window datasets over one split, and the epoch-by-epoch order their iterators read records in.

An iterator's position is ``(epoch, index)`` into that order; the order of any epoch is rebuilt
from ``(seed, epoch)`` alone, so a restored position costs the same as a fresh one.
"""

from __future__ import annotations

from typing import Any

import grain.python as grain
import numpy as np

from levanter.data.tokenized import TokenizedSplit

__all__ = ["EpochOrder", "SplitWindowDataset"]


class SplitWindowDataset(grain.IterDataset):
    """Base of the datasets that cut windows of ``window`` tokens from one split's records.

    Args:
        split: the records to read.
        window: tokens per window (``seq_len + 1``); at least 2.
        seed: seeds each epoch's permutation.
        shuffle: visit records in a permutation that changes every epoch, else in stored order.
        repeat: start a new epoch after the last record, else end the stream there.
    """

    def __init__(self, split: TokenizedSplit, window: int, *, seed: int, shuffle: bool = True,
                 repeat: bool = True):
        super().__init__()
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        self.split, self.window, self.seed = split, window, seed
        self.shuffle, self.repeat = shuffle, repeat

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.split.path}:{self.split.split}, window={self.window})"


class EpochOrder:
    """Which record of a ``SplitWindowDataset`` stands at position ``(epoch, index)``.

    One per iterator: it caches the current epoch's permutation.
    """

    def __init__(self, ds: SplitWindowDataset):
        self._ds = ds
        self.size = ds.split.num_documents
        self._perm_epoch, self._perm = -1, np.arange(self.size)

    def position(self, epoch: int, index: int) -> tuple[int, int]:
        """``(epoch, index)``, or the start of the next epoch when ``index`` is past the last record.

        Raises:
            StopIteration: past the last record and the dataset does not repeat.
        """
        if index != self.size:
            return epoch, index
        if not self._ds.repeat:
            raise StopIteration
        return epoch + 1, 0

    def record(self, epoch: int, index: int) -> Any:
        """The stored record at ``index`` of ``epoch``'s order."""
        return self._ds.split.source[self.record_index(epoch, index)]

    def record_index(self, epoch: int, index: int) -> int:
        """Which stored record (its position in the split) stands at ``index`` of ``epoch``'s order."""
        return int(self._permutation(epoch)[index])

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self._ds.shuffle:
            return self._perm
        if epoch != self._perm_epoch:
            # Seeded by (seed, epoch) alone so any position can be rebuilt without earlier epochs.
            rng = np.random.default_rng([self._ds.seed, epoch])
            self._perm, self._perm_epoch = rng.permutation(self.size), epoch
        return self._perm
