"""Grain iterator datasets: document packing and weighted mixtures, with O(1) state restore.

Both keep their position as a few integers (never a replay log), so restoring a checkpointed
iterator costs the same as opening a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain.python as grain
import numpy as np

from levanter.data.epochs import EpochOrder, SplitWindowDataset
from levanter.data.tokenized import decode_document

__all__ = ["MixtureIterDataset", "PackedIterDataset"]

_MIX_BLOCK = 4096


class PackedIterDataset(SplitWindowDataset):
    """Windows of ``window`` tokens cut from the concatenation ``doc, EOS, doc, EOS, ...``.

    Documents are visited in a seeded permutation that changes every epoch (when ``shuffle``);
    with ``repeat`` the stream is endless, otherwise it ends when a window cannot be completed.
    Windows do not overlap: each token of the stream lands in exactly one window.
    """

    def __iter__(self) -> grain.DatasetIterator:
        return _PackedIterator(self)


class _PackedIterator(grain.DatasetIterator):
    def __init__(self, ds: PackedIterDataset):
        super().__init__()
        self._ds = ds
        self._order = EpochOrder(ds)
        self._epoch, self._doc, self._offset = 0, 0, 0

    def __next__(self) -> np.ndarray:
        out = np.empty(self._ds.window, dtype=np.int32)
        filled, empty_docs = 0, 0
        epoch, doc, offset = self._epoch, self._doc, self._offset
        while filled < self._ds.window:
            epoch, doc = self._order.position(epoch, doc)
            tokens = decode_document(self._order.record(epoch, doc))
            # Each document contributes its tokens followed by one EOS separator.
            length = len(tokens) + 1
            take = min(length - offset, self._ds.window - filled)
            if len(tokens) == 0:
                empty_docs += 1
                if empty_docs > self._order.size:
                    raise ValueError(f"{self._ds.split.path}: every document is empty")
            body = tokens[offset:offset + take]
            out[filled:filled + len(body)] = body
            if len(body) < take:
                out[filled + len(body)] = self._ds.split.eos_id
            filled += take
            offset += take
            if offset == length:
                doc, offset = doc + 1, 0
        self._epoch, self._doc, self._offset = epoch, doc, offset
        return out

    def get_state(self) -> dict[str, Any]:
        return {"epoch": int(self._epoch), "doc": int(self._doc), "offset": int(self._offset)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._epoch, self._doc, self._offset = int(state["epoch"]), int(state["doc"]), int(state["offset"])


class MixtureIterDataset(grain.IterDataset):
    """Draws each element from one of ``parents`` chosen at random with probability ``weights``.

    The choice for element ``n`` depends only on ``(seed, n)``, so the state is the element count
    plus each parent's state.
    """

    def __init__(self, parents: Sequence[grain.IterDataset], weights: Sequence[float], *, seed: int):
        super().__init__(list(parents))
        if len(parents) != len(weights) or not parents:
            raise ValueError(f"need one weight per dataset, got {len(parents)} datasets and {len(weights)} weights")
        w = np.asarray(weights, dtype=np.float64)
        if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {list(weights)}")
        self.weights = w / w.sum()
        self.seed = seed

    def __iter__(self) -> grain.DatasetIterator:
        return _MixtureIterator(self)


class _MixtureIterator(grain.DatasetIterator):
    def __init__(self, ds: MixtureIterDataset):
        super().__init__([iter(p) for p in ds.parents])
        self._ds = ds
        self._count = 0
        self._block_id, self._block = -1, np.empty(0, dtype=np.int64)

    def _choice(self, n: int) -> int:
        block_id = n // _MIX_BLOCK
        if block_id != self._block_id:
            rng = np.random.default_rng([self._ds.seed, block_id])
            self._block = rng.choice(len(self._ds.weights), size=_MIX_BLOCK, p=self._ds.weights)
            self._block_id = block_id
        return int(self._block[n % _MIX_BLOCK])

    def __next__(self) -> Any:
        element = next(self._parents[self._choice(self._count)])
        self._count += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {"count": int(self._count), "parents": [p.get_state() for p in self._parents]}

    def set_state(self, state: dict[str, Any]) -> None:
        self._count = int(state["count"])
        for parent, parent_state in zip(self._parents, state["parents"], strict=True):
            parent.set_state(parent_state)
