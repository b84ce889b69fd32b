"""Grain input pipeline: packing, mixtures, shuffling and state restore."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from levanter.data import DatasetSpec, PackedIterDataset, eval_batches, open_split, train_dataset
from testsupport.levanter_data import write_tokenized

EOS = 999


def _docs(n: int, base: int) -> list[list[int]]:
    return [[base + 10 * i + j for j in range(1 + i % 5)] for i in range(n)]


def _close(it) -> None:
    it.close()


def test_packing_concatenates_documents_with_eos(tmp_path):
    docs = _docs(7, 0)
    data = write_tokenized(str(tmp_path / "a"), {"train": docs}, vocab_size=1000, eos_id=EOS)
    split = open_split(data, "train")
    it = iter(PackedIterDataset(split, 4, seed=0, shuffle=False, repeat=False))
    windows = list(it)
    stream = [t for d in docs for t in [*d, EOS]]
    expected = [stream[i:i + 4] for i in range(0, len(stream) - 3, 4)]
    assert [w.tolist() for w in windows] == expected
    assert all(w.dtype == np.int32 for w in windows)


def test_repeat_wraps_into_a_new_epoch_in_a_new_order(tmp_path):
    docs = _docs(30, 0)
    data = write_tokenized(str(tmp_path / "a"), {"train": docs}, vocab_size=1000, eos_id=EOS)
    split = open_split(data, "train")
    stream_len = sum(len(d) + 1 for d in docs)
    it = iter(PackedIterDataset(split, 2, seed=3))
    tokens = np.concatenate([next(it) for _ in range(stream_len)])  # two epochs (stream_len is even)
    first, second = tokens[:stream_len], tokens[stream_len:]
    assert sorted(first.tolist()) == sorted(second.tolist())
    assert first.tolist() != second.tolist()


def test_shuffle_is_seeded(tmp_path):
    data = write_tokenized(str(tmp_path / "a"), {"train": _docs(50, 0)}, vocab_size=1000, eos_id=EOS)

    def first_batches(seed: int) -> list[list[int]]:
        it = iter(train_dataset([DatasetSpec(data)], seq_len=7, batch_size=2, seed=seed, prefetch=2))
        out = [next(it).tolist() for _ in range(5)]
        _close(it)
        return out

    assert first_batches(1) == first_batches(1)
    assert first_batches(1) != first_batches(2)


def test_mixture_follows_weights(tmp_path):
    a = write_tokenized(str(tmp_path / "a"), {"train": _docs(50, 0)}, vocab_size=100_000, eos_id=EOS)
    b = write_tokenized(str(tmp_path / "b"), {"train": _docs(50, 50_000)}, vocab_size=100_000, eos_id=EOS)
    it = iter(train_dataset([DatasetSpec(a, 3.0), DatasetSpec(b, 1.0)], seq_len=3, batch_size=10, seed=0))
    windows = np.concatenate([next(it) for _ in range(200)])
    _close(it)
    # A window comes from b when it holds any id of b's range (EOS excluded).
    from_b = np.mean([(w[w != EOS] >= 50_000).any() for w in windows])
    assert abs(from_b - 0.25) < 0.03


def test_mixture_rejects_mismatched_vocabularies(tmp_path):
    from levanter.data import data_vocab_size

    a = write_tokenized(str(tmp_path / "a"), {"train": _docs(5, 0)}, vocab_size=1000, eos_id=EOS)
    b = write_tokenized(str(tmp_path / "b"), {"train": _docs(5, 0)}, vocab_size=2000, eos_id=EOS)
    with pytest.raises(ValueError, match="share a vocabulary"):
        data_vocab_size([DatasetSpec(a), DatasetSpec(b)])


def test_state_restore_resumes_at_the_exact_position(tmp_path):
    a = write_tokenized(str(tmp_path / "a"), {"train": _docs(40, 0)}, vocab_size=100_000, eos_id=EOS)
    b = write_tokenized(str(tmp_path / "b"), {"train": _docs(25, 50_000)}, vocab_size=100_000, eos_id=EOS)
    ds = train_dataset([DatasetSpec(a, 1.0), DatasetSpec(b, 2.0)], seq_len=5, batch_size=3, seed=7, prefetch=3)
    it = iter(ds)
    for _ in range(17):  # past an epoch of b, with prefetched batches in flight
        next(it)
    state = json.loads(json.dumps(it.get_state()))  # the state survives JSON (the checkpoint format)
    expected = [next(it).tolist() for _ in range(10)]
    _close(it)
    restored = iter(ds)
    restored.set_state(state)
    assert [next(restored).tolist() for _ in range(10)] == expected
    _close(restored)


def test_chat_windows_hold_one_record_each_reshuffle_per_epoch_and_restore_mid_epoch(tmp_path):
    from levanter.data import ChatIterDataset, encode_chat_record

    n = 9
    records = [encode_chat_record([([100 + i] * (1 + i % 3), [True] * (1 + i % 3))]) for i in range(n)]
    data = write_tokenized(str(tmp_path / "c"), {"train": [np.frombuffer(r, "<u4").tolist() for r in records]},
                           vocab_size=1000, eos_id=EOS)
    split = open_split(data, "train")
    ds = ChatIterDataset(split, 4, seed=1)
    assert str(ds) == f"ChatIterDataset({data}:train, window=4)"
    it = iter(ds)
    firsts = [int(next(it)[0, 0]) for _ in range(2 * n)]  # each window is one record: its first id names it
    assert sorted(firsts[:n]) == sorted(firsts[n:]) == [100 + i for i in range(n)]
    assert firsts[:n] != firsts[n:]
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it).tolist() for _ in range(n + 3)]  # across the next epoch boundary
    restored = iter(ds)
    restored.set_state(state)
    assert [next(restored).tolist() for _ in range(n + 3)] == expected
    in_order = [int(w[0, 0]) for w in ChatIterDataset(split, 4, seed=1, shuffle=False, repeat=False)]
    assert in_order == [100 + i for i in range(n)]


def test_eval_batches_are_fixed_and_fill_small_splits(tmp_path):
    data = write_tokenized(str(tmp_path / "a"), {"train": _docs(5, 0), "validation": _docs(3, 0)},
                           vocab_size=1000, eos_id=EOS)
    batches = eval_batches([DatasetSpec(data)], seq_len=3, batch_size=4, max_batches=2)
    assert len(batches) == 1 and batches[0].shape == (4, 4)
    assert [b.tolist() for b in batches] == [b.tolist() for b in
                                             eval_batches([DatasetSpec(data)], seq_len=3, batch_size=4, max_batches=2)]


def test_remote_shards_are_read_through_a_local_cache(tmp_path):
    import fsspec

    docs = _docs(9, 0)
    local = write_tokenized(str(tmp_path / "a"), {"train": docs}, vocab_size=1000, eos_id=EOS)
    mem = fsspec.filesystem("memory")
    for rel in ("index.json", "train/part-00000.array_record"):
        mem.pipe_file(f"/tok-test/{rel}", open(os.path.join(local, rel), "rb").read())
    split = open_split("memory://tok-test", "train", cache_dir=str(tmp_path / "cache"))
    assert split.num_documents == 9
    assert os.listdir(tmp_path / "cache")
    windows = list(iter(PackedIterDataset(split, 4, seed=0, shuffle=False, repeat=False)))
    stream = [t for d in docs for t in [*d, EOS]]
    assert windows[0].tolist() == stream[:4]


def test_a_folder_that_is_not_a_tokenized_dataset_is_named(tmp_path):
    from zephyr import DataError

    with pytest.raises(DataError, match=r"index\.json: no shard index"):
        open_split(str(tmp_path), "train")
    data = write_tokenized(str(tmp_path / "a"), {"train": _docs(3, 0)}, vocab_size=1000, eos_id=EOS)
    index = json.loads(open(os.path.join(data, "index.json")).read())
    with open(os.path.join(data, "index.json"), "w") as f:
        json.dump({**index, "format": "zephyr.jsonl/v1"}, f)
    with pytest.raises(DataError, match=r"format must be one of 'marin.tokenized/v1', 'marin.tokenized_chat/v1', "
                                        r"'marin.tokenized_preference/v1', got 'zephyr.jsonl/v1'"):
        open_split(data, "train")
    with open(os.path.join(data, "index.json"), "w") as f:
        json.dump({k: v for k, v in index.items() if k != "eos_id"}, f)
    with pytest.raises(DataError, match=r"missing field 'eos_id'"):
        open_split(data, "train")
