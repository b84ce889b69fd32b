"""Packing many short sequences into rows of ``seq_len`` tokens, each its own attention segment.

A row holds several sequences back to back; ``segment_ids`` numbers them 1, 2, ... within the
row and marks padding 0, the convention of packed chat data (``levanter.data.chat``), so the
model keeps attention inside a sequence and restarts rotary positions at its first token.

Sequences are placed longest first, each into the fullest row that still has room for it (best
fit decreasing), which leaves little padding when the sequences are much shorter than a row.
The placement depends only on the sequences' lengths and their order, so the same requests in
the same order are always packed the same way. Pure numpy: no JAX here.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["Layout", "PackStats", "plan_rows"]


@dataclasses.dataclass(frozen=True)
class PackStats:
    """How full the packed batches were (added up over calls with ``+``)."""

    sequences: int = 0
    """Sequences placed."""
    tokens: int = 0
    """Their tokens."""
    slots: int = 0
    """Token slots of the batches that ran (``batches * batch_size * seq_len``)."""
    batches: int = 0
    """Forward passes (a generation step over one batch counts once)."""

    @property
    def pad_fraction(self) -> float:
        """Share of the slots that held padding (0.0 when nothing ran)."""
        return 1.0 - self.tokens / self.slots if self.slots else 0.0

    def __add__(self, other: PackStats) -> PackStats:
        return PackStats(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def to_json(self) -> dict[str, float | int]:
        return {**dataclasses.asdict(self), "pad_fraction": self.pad_fraction}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each sequence sits: row ``row[i]``, columns ``start[i]`` to ``start[i] + length[i]``.

    There are ``num_batches * batch_size`` rows; rows past the last used one are all padding.
    """

    row: np.ndarray
    """``[n]`` int64: the row of sequence ``i``."""
    start: np.ndarray
    """``[n]`` int64: the column of its first token."""
    length: np.ndarray
    """``[n]`` int64: its length."""
    seq_len: int
    """Columns per row."""
    batch_size: int
    """Rows per batch."""
    num_rows: int
    """Rows in all (a multiple of ``batch_size``)."""

    @property
    def num_batches(self) -> int:
        return self.num_rows // self.batch_size

    def rows_of(self, batch: int) -> slice:
        """The rows of batch ``batch``."""
        return slice(batch * self.batch_size, (batch + 1) * self.batch_size)

    def scatter(self, values: Sequence[Sequence[int]], fill: int = 0) -> np.ndarray:
        """``[num_rows, seq_len]`` int32 holding ``values[i]`` (``length[i]`` numbers) where sequence ``i`` sits."""
        out = np.full((self.num_rows, self.seq_len), fill, dtype=np.int32)
        for i, v in enumerate(values):
            out[self.row[i], self.start[i]:self.start[i] + self.length[i]] = v
        return out

    def segment_ids(self) -> np.ndarray:
        """``[num_rows, seq_len]`` int32: 1, 2, ... per sequence in column order within its row, 0 for padding."""
        out = np.zeros((self.num_rows, self.seq_len), dtype=np.int32)
        next_segment = np.ones(self.num_rows, dtype=np.int32)
        for i in np.lexsort((self.start, self.row)):
            r, s = self.row[i], self.start[i]
            out[r, s:s + self.length[i]] = next_segment[r]
            next_segment[r] += 1
        return out

    def gather(self, array: np.ndarray, i: int) -> np.ndarray:
        """The entries of ``array`` (``[num_rows, seq_len, ...]``) where sequence ``i`` sits."""
        return array[self.row[i], self.start[i]:self.start[i] + self.length[i]]

    def stats(self) -> PackStats:
        return PackStats(sequences=len(self.length), tokens=int(self.length.sum()),
                         slots=self.num_rows * self.seq_len, batches=self.num_batches)


def plan_rows(lengths: Sequence[int], seq_len: int, batch_size: int) -> Layout:
    """Place sequences of ``lengths`` (each 1..``seq_len``) into rows of ``seq_len`` columns.

    Raises:
        ValueError: a length is 0 or more than ``seq_len``, or a size is not positive.
    """
    if seq_len <= 0 or batch_size <= 0:
        raise ValueError(f"seq_len and batch_size must be > 0, got {seq_len} and {batch_size}")
    length = np.asarray(lengths, dtype=np.int64).reshape(-1)
    bad = np.flatnonzero((length <= 0) | (length > seq_len))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"sequence {i} has {length[i]} tokens; each must have 1 to seq_len={seq_len}")
    # Longest first; equal lengths keep their order (a stable sort), so placement is deterministic.
    order = np.argsort(-length, kind="stable")
    row = np.empty(len(length), dtype=np.int64)
    start = np.empty(len(length), dtype=np.int64)
    fill: list[int] = []
    # Rows that still have room, as sorted (free columns, row) pairs: bisect finds the best fit.
    open_rows: list[tuple[int, int]] = []
    for i in order:
        n = int(length[i])
        at = bisect.bisect_left(open_rows, (n, -1))
        if at == len(open_rows):
            r = len(fill)
            fill.append(0)
        else:
            r = open_rows.pop(at)[1]
        row[i], start[i] = r, fill[r]
        fill[r] += n
        if fill[r] < seq_len:
            bisect.insort(open_rows, (seq_len - fill[r], r))
    num_rows = -(-max(len(fill), 1) // batch_size) * batch_size
    return Layout(row=row, start=start, length=length, seq_len=seq_len, batch_size=batch_size, num_rows=num_rows)
