"""The training input pipeline: mixture of packed datasets → batches → thread prefetch."""

from __future__ import annotations

from collections.abc import Sequence

import grain.python as grain
import numpy as np

from levanter.data.chat import plain_window
from levanter.data.chat_windows import ChatIterDataset
from levanter.data.packing import MixtureIterDataset, PackedIterDataset
from levanter.data.spec import DatasetSpec, MixturePhase
from levanter.data.tokenized import TokenizedSplit, open_split
from rigging import filesystem as fs
from zephyr import DataError
from zephyr.shards import index_groups, read_index

__all__ = ["DatasetSpec", "check_dataset", "check_mixture_data", "data_is_chat", "data_vocab_size", "eval_batches", "split_windows",
           "train_dataset"]


def data_is_chat(specs: Sequence[DatasetSpec]) -> bool:
    """Whether any dataset holds chat records: then every window is ``[3, seq_len + 1]`` (ids,
    loss mask, segment ids) and plain datasets count every token in one segment."""
    from levanter.data.chat import CHAT_FORMAT
    from levanter.data.tokenized import read_index

    return any(read_index(s.path)["format"] == CHAT_FORMAT for s in specs)


def split_windows(split: TokenizedSplit, window: int, chat: bool, *, seed: int, shuffle: bool,
                  repeat: bool) -> grain.IterDataset:
    """Windows of ``window`` tokens of one split: chat records one per window (``[3, window]``),
    plain text packed (``[window]``, or as one-segment chat rows when ``chat``)."""
    if split.is_chat:
        return ChatIterDataset(split, window, seed=seed, shuffle=shuffle, repeat=repeat)
    packed = PackedIterDataset(split, window, seed=seed, shuffle=shuffle, repeat=repeat)
    return packed.map(plain_window) if chat else packed


def _open_all(specs: Sequence[DatasetSpec], split: str, cache_dir: str | None) -> list[TokenizedSplit]:
    return [open_split(s.path, split, cache_dir) for s in specs]


def data_vocab_size(specs: Sequence[DatasetSpec]) -> int:
    """The vocabulary size shared by every dataset of the mixture.

    Raises:
        ValueError: datasets were tokenized with different vocabularies (ids would not agree).
    """
    from levanter.data.tokenized import read_index

    sizes = {s.path: int(read_index(s.path)["vocab_size"]) for s in specs}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"datasets of one mixture must share a vocabulary, got vocab sizes {sizes}")
    return next(iter(sizes.values()))


def train_dataset(specs: Sequence[DatasetSpec], *, seq_len: int, batch_size: int, seed: int,
                  prefetch: int = 4, cache_dir: str | None = None, rows: slice | None = None,
                  phases: Sequence[MixturePhase] = ()) -> grain.IterDataset:
    """Endless batches ``[batch_size, seq_len + 1]`` (int32) of packed, shuffled, mixed training data
    (``[batch_size, 3, seq_len + 1]`` when a dataset holds chat records, see :func:`data_is_chat`).

    Iterate it with ``iter(...)``; the iterator's ``get_state()`` / ``set_state()`` save and restore
    the position of the batches already consumed (prefetched ones are not counted).

    Args:
        specs: the datasets and their weights.
        seq_len: model context; windows hold one more token so inputs and targets both have seq_len.
        batch_size: windows per batch.
        seed: drives document order and mixture draws.
        prefetch: batches prepared ahead in a background thread (0 disables prefetch).
        cache_dir: where remote shards are copied before reading.
        rows: keep only these rows of every batch (one process's share of a multi-host batch; every
            process reads the same stream, so the shares never overlap and the batch stays whole).
        phases: later phases of the mixture: from batch ``start_step`` on (counted from the
            stream's first batch), windows are drawn with the phase's weights.
    """
    if not specs:
        raise ValueError("need at least one dataset")
    splits = _open_all(specs, "train", cache_dir)
    chat = any(s.is_chat for s in splits)
    packed = [split_windows(s, seq_len + 1, chat, seed=seed * 1_000_003 + i, shuffle=True, repeat=True)
              for i, s in enumerate(splits)]
    later = [(p.start_step * batch_size, p.weights) for p in phases]
    mixed = MixtureIterDataset(packed, [s.weight for s in specs], seed=seed, phases=later)
    batched = mixed.batch(batch_size, drop_remainder=True)
    if rows is not None and (rows.start or 0, rows.stop) != (0, batch_size):
        batched = batched.map(_RowSlice(rows))
    if prefetch > 0:
        batched = grain.experimental.ThreadPrefetchIterDataset(batched, prefetch_buffer_size=prefetch)
    return batched


def check_mixture_data(specs: Sequence[DatasetSpec]) -> None:
    """Refuse a mixture one of whose datasets is missing or incomplete, before anything trains on it.

    Each dataset needs its ``index.json`` (written last by the tokenize step), a ``train`` split
    with tokens, and every shard the index lists, at the size it records (one listing per dataset).
    Preference pairs are refused too: they train a preference loss, not a language model.

    Raises:
        ValueError: one line naming the dataset and what is wrong with it.
    """
    from levanter.data.chat import PREFERENCE_FORMAT

    for i, spec in enumerate(specs):
        where = f"mixture dataset {i + 1} of {len(specs)} ({spec.path})"
        if check_dataset(spec.path, where)["format"] == PREFERENCE_FORMAT:
            raise ValueError(f"{where}: holds preference pairs (chosen and rejected): train on it with a preference "
                             "loss (marin.experiment.dpo), not as language-model data")


def check_dataset(path: str, where: str) -> dict:
    """The index of the tokenized dataset at ``path``, once its shards are all there at their sizes.

    Raises:
        ValueError: one line starting with ``where``: the index is missing, lists no training data,
            or a shard is missing or of another size.
    """
    try:
        index = read_index(str(path))
    except DataError as e:
        raise ValueError(f"{where}: tokenized data missing or incomplete: {e}; build it before training on "
                         "it (a mixture never trains without one of its datasets)") from None
    splits = dict(index_groups(index))
    train = splits.get("train")
    if not train or not train.get("shards") or not int(train.get("tokens", 1)):
        raise ValueError(f"{where}: its index lists no training data (splits: {sorted(splits)})")
    present = dict(fs.walk_files(str(path)))
    for _name, group in splits.items():
        for shard in group["shards"]:
            size = present.get(shard["path"])
            if size != shard["bytes"]:
                found = "is missing" if size is None else f"has {size} bytes"
                raise ValueError(f"{where}: tokenized data incomplete: shard {shard['path']} {found}, its index "
                                 f"says {shard['bytes']} bytes; rebuild it before training on it")
    return index


class _RowSlice(grain.MapTransform):
    def __init__(self, rows: slice):
        self.rows = rows

    def map(self, batch: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(batch[self.rows])


def eval_batches(specs: Sequence[DatasetSpec], *, seq_len: int, batch_size: int, max_batches: int,
                 cache_dir: str | None = None) -> list[np.ndarray]:
    """Up to ``max_batches`` fixed validation batches: each dataset's ``validation`` split in order.

    Every dataset contributes windows in proportion to its weight, so the validation loss
    measures the same mixture as training. Datasets without a validation split are left out.
    Returns [] when no dataset has validation data.
    """
    specs = [s for s in specs if s.weight > 0]
    opened = []
    for spec in specs:
        try:
            opened.append((spec, open_split(spec.path, "validation", cache_dir)))
        except KeyError:
            continue
    if not opened:
        return []
    chat = any(split.is_chat for _spec, split in opened)
    total_w = sum(spec.weight for spec, _ in opened)
    want = max_batches * batch_size
    windows: list[np.ndarray] = []
    for spec, split in opened:
        quota = max(1, int(round(want * spec.weight / total_w)))
        it = iter(split_windows(split, seq_len + 1, chat, seed=0, shuffle=False, repeat=False))
        for _ in range(quota):
            try:
                windows.append(next(it))
            except StopIteration:
                break
    if 0 < len(windows) < batch_size:
        # A validation split smaller than one batch still gives a loss: repeat its windows (each
        # window's loss is unchanged; the mean just weights them evenly).
        windows = [windows[i % len(windows)] for i in range(batch_size)]
    n = (len(windows) // batch_size) * batch_size
    return [np.stack(windows[i:i + batch_size]) for i in range(0, min(n, want), batch_size)]
