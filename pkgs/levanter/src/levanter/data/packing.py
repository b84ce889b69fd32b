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

__all__ = ["MixtureIterDataset", "MixtureSchedule", "PackedIterDataset"]

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


def _normalised(weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all 0, got {list(weights)}")
    return w / w.sum()


class MixtureSchedule:
    """Which parent element ``n`` of a mixture is drawn from: a pure function of ``(seed, n)`` and
    the weights of the phase ``n`` falls in, so any position is rebuilt without replaying the ones before.

    Element ``n`` takes the ``n % 4096``-th of 4096 uniform draws seeded by ``(seed, n // 4096)``
    and finds it in its phase's cumulative weights (with one phase: ``Generator.choice``'s draws).

    Args:
        phases: ``(first element, weights)`` of each phase, the first at element 0.
        seed: seeds the draws.
    """

    def __init__(self, phases: Sequence[tuple[int, Sequence[float]]], *, seed: int):
        if not phases or phases[0][0] != 0:
            raise ValueError(f"a mixture's first phase must start at element 0, got {[p[0] for p in phases]}")
        starts = [int(start) for start, _ in phases]
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError(f"phases must start at increasing elements, got {starts}")
        weights = [_normalised(w) for _, w in phases]
        if len({len(w) for w in weights}) != 1:
            raise ValueError(f"every phase needs one weight per dataset, got {[len(w) for w in weights]}")
        self.starts = np.asarray(starts, dtype=np.int64)
        self.weights = weights
        self.seed = seed
        cdfs = []
        for w in weights:
            cdf = w.cumsum()
            cdf /= cdf[-1]
            cdfs.append(cdf)
        self._cdfs = cdfs

    @property
    def size(self) -> int:
        """How many datasets the mixture draws from."""
        return len(self.weights[0])

    def block(self, block_id: int) -> np.ndarray:
        """The datasets elements ``[block_id * 4096, (block_id + 1) * 4096)`` are drawn from."""
        uniform = np.random.default_rng([self.seed, block_id]).random(_MIX_BLOCK)
        first = block_id * _MIX_BLOCK
        phase = np.searchsorted(self.starts, np.arange(first, first + _MIX_BLOCK), side="right") - 1
        if phase[0] == phase[-1]:
            return self._cdfs[int(phase[0])].searchsorted(uniform, side="right")
        out = np.empty(_MIX_BLOCK, dtype=np.int64)
        for p in np.unique(phase):
            at = phase == p
            out[at] = self._cdfs[int(p)].searchsorted(uniform[at], side="right")
        return out

    def counts(self, start: int, stop: int) -> np.ndarray:
        """How many of the elements ``[start, stop)`` each dataset gives (int64, one per dataset)."""
        out = np.zeros(self.size, dtype=np.int64)
        for block_id in range(start // _MIX_BLOCK, -(-stop // _MIX_BLOCK) if stop > start else 0):
            first = block_id * _MIX_BLOCK
            chosen = self.block(block_id)[max(start - first, 0):min(stop - first, _MIX_BLOCK)]
            out += np.bincount(chosen, minlength=self.size)
        return out


class MixtureIterDataset(grain.IterDataset):
    """Draws each element from one of ``parents`` chosen at random with probability ``weights``
    (from element ``phases[i][0]`` on, with ``phases[i][1]``: see :class:`MixtureSchedule`).

    The choice for element ``n`` depends only on ``(seed, n)`` and its phase's weights, so the
    state is the element count plus each parent's state.
    """

    def __init__(self, parents: Sequence[grain.IterDataset], weights: Sequence[float], *, seed: int,
                 phases: Sequence[tuple[int, Sequence[float]]] = ()):
        super().__init__(list(parents))
        if len(parents) != len(weights) or not parents:
            raise ValueError(f"need one weight per dataset, got {len(parents)} datasets and {len(weights)} weights")
        self.schedule = MixtureSchedule([(0, weights), *phases], seed=seed)
        self.weights = self.schedule.weights[0]
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
            self._block = self._ds.schedule.block(block_id)
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
