"""Mixtures by phase: each phase's proportions, the draws a pure function of (seed, element, phase
weights), a resumed stream bit-identical across a boundary, the token accounting, and a mixture
refused before training when one of its datasets is missing or incomplete. No model is trained:
the trainer's own resume tests show that the same batches give the same parameters."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from levanter.config import DataConfig, config_from_dict, config_to_dict
from levanter.data import DatasetSpec, MixturePhase, check_mixture_data, train_dataset
from levanter.data.packing import MixtureSchedule
from levanter.data.usage import mixture_usage, starting_data_state
from testsupport.levanter_data import tiny_config, write_tokenized

EOS = 999
B_IDS = 50_000  # every id of dataset b is at least this


@pytest.fixture
def two(tmp_path) -> tuple[str, str]:
    a = write_tokenized(str(tmp_path / "a"), {"train": [[1 + i % 40] * 6 for i in range(60)]}, vocab_size=100_000,
                        eos_id=EOS)
    b = write_tokenized(str(tmp_path / "b"), {"train": [[B_IDS + i] * 6 for i in range(60)]}, vocab_size=100_000,
                        eos_id=EOS)
    return a, b


def _stream(a: str, b: str, phases=(MixturePhase(10, (0.1, 0.9)),)):
    # batch 10, window 4: a window holds tokens of one dataset and its separators
    return train_dataset([DatasetSpec(a, 0.9), DatasetSpec(b, 0.1)], seq_len=3, batch_size=10, seed=5, prefetch=2,
                         phases=phases)


def _from_b(batch: np.ndarray) -> list[bool]:
    return [bool((w[w != EOS] >= B_IDS).any()) for w in batch]


def test_a_static_mixture_draws_what_it_always_drew():
    # The draws before phases existed: Generator.choice over blocks of 4096 seeded by (seed, block).
    for weights, seed, block in (([3.0, 1.0], 0, 0), ([0.7, 0.2, 0.1], 7, 3), ([1.0, 0.0, 2.0], 123, 1)):
        p = np.asarray(weights) / sum(weights)
        before = np.random.default_rng([seed, block]).choice(len(p), size=4096, p=p)
        assert np.array_equal(MixtureSchedule([(0, weights)], seed=seed).block(block), before)


def test_each_phase_draws_its_own_weights_and_the_summary_counts_exactly_what_was_drawn(two):
    it = iter(_stream(*two))
    picks = [_from_b(next(it)) for _ in range(20)]
    it.close()
    before, after = np.mean(picks[:10]), np.mean(picks[10:])
    assert before < 0.2 and after > 0.8, (before, after)
    usage = mixture_usage([DatasetSpec(two[0], 0.9), DatasetSpec(two[1], 0.1)], [MixturePhase(10, (0.1, 0.9))],
                          seed=5, batch_size=10, seq_len=3, first_step=0, last_step=20)
    b_windows = [sum(p) for p in (sum(picks[:10], []), sum(picks[10:], []))]
    assert [ph.tokens[1] for ph in usage.phases] == [3 * n for n in b_windows]
    assert [(ph.start_step, ph.end_step) for ph in usage.phases] == [(0, 10), (10, 20)]
    assert usage.tokens == tuple(x + y for x, y in zip(*(ph.tokens for ph in usage.phases), strict=True))
    assert sum(usage.tokens) == 20 * 10 * 3


def test_a_stream_resumed_across_a_boundary_is_bit_identical(two):
    uninterrupted = iter(_stream(*two))
    whole = [next(uninterrupted).tolist() for _ in range(14)]
    uninterrupted.close()
    first = iter(_stream(*two))
    head = [next(first).tolist() for _ in range(7)]  # stopped after step 7, three steps before the boundary
    state = json.loads(json.dumps(first.get_state()))  # as a checkpoint keeps it
    first.close()
    resumed = iter(_stream(*two))
    resumed.set_state(state)
    tail = [next(resumed).tolist() for _ in range(7)]
    resumed.close()
    assert head + tail == whole
    # The weights are part of the draws: another second phase draws another stream from step 10 on.
    other = iter(_stream(*two, phases=(MixturePhase(10, (0.5, 0.5)),)))
    differs = [next(other).tolist() for _ in range(14)]
    other.close()
    assert differs[:10] == whole[:10] and differs[10:] != whole[10:]


def test_where_a_run_with_phases_starts_its_stream():
    fresh = {"count": 0, "parents": [{"doc": 0}, {"doc": 0}, {"doc": 0}]}
    saved = {"count": 40, "parents": [{"doc": 7}, {"doc": 3}]}
    # A branch reading its source's position: a dataset added after the source's starts at its beginning.
    assert starting_data_state(fresh, saved, step=5, batch_size=8, phased=True, branch=True) == {
        "count": 40, "parents": [{"doc": 7}, {"doc": 3}, {"doc": 0}]}
    # reset_data_loader: a fresh stream, its draws at the branch's step, so phases start where they say.
    assert starting_data_state(fresh, None, step=5, batch_size=8, phased=True, branch=True)["count"] == 40
    assert starting_data_state(fresh, None, step=5, batch_size=8, phased=False, branch=True) is None
    with pytest.raises(ValueError, match="a mixture of 2 datasets, this one has 3"):
        starting_data_state(fresh, saved, step=5, batch_size=8, phased=True, branch=False)


def test_a_missing_or_incomplete_dataset_is_refused_before_training(two, tmp_path):
    a, b = two
    check_mixture_data([DatasetSpec(a), DatasetSpec(b)])
    with pytest.raises(ValueError, match=r"mixture dataset 2 of 2 \(.*/nowhere\): tokenized data missing or "
                                         r"incomplete: .*no shard index"):
        check_mixture_data([DatasetSpec(a), DatasetSpec(str(tmp_path / "nowhere"))])
    shard = os.path.join(b, "train", "part-00000.array_record")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 3)  # as an interrupted copy leaves it
    with pytest.raises(ValueError, match=r"mixture dataset 2 of 2 .*shard train/part-00000.array_record has "
                                         r"\d+ bytes, its index says \d+ bytes"):
        check_mixture_data([DatasetSpec(a), DatasetSpec(b)])
    os.remove(shard)
    with pytest.raises(ValueError, match="shard train/part-00000.array_record is missing"):
        check_mixture_data([DatasetSpec(a), DatasetSpec(b)])


def test_phases_are_checked_and_survive_the_run_config(two):
    a, b = two
    specs = (DatasetSpec(a, 0.7), DatasetSpec(b, 0.3))
    with pytest.raises(ValueError, match="the phase at step 4 has 1 weights for 2 datasets"):
        DataConfig(datasets=specs, phases=(MixturePhase(4, (1.0,)),))
    with pytest.raises(ValueError, match="phases must start at increasing steps after step 0, got 2 after 4"):
        DataConfig(datasets=specs, phases=(MixturePhase(4, (1, 1)), MixturePhase(2, (1, 1))))
    with pytest.raises(ValueError, match=r"phase at step 3: weights must not all be 0, got \[0, 0\]"):
        MixturePhase(3, (0, 0))
    config = tiny_config(a)
    config = dataclasses.replace(config, data=DataConfig(datasets=specs, phases=(MixturePhase(4, (0.2, 0.8)),)))
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))).data == config.data


def test_training_refuses_an_incomplete_mixture_before_it_writes_anything(two, tmp_path):
    from levanter.trainer import main  # JAX: only for the one test that reaches the trainer

    config = tiny_config(two[0])
    config = dataclasses.replace(config, data=DataConfig(datasets=(DatasetSpec(two[0]),
                                                                    DatasetSpec(str(tmp_path / "half-built")))))
    os.makedirs(tmp_path / "half-built" / "train")  # shards written, no index yet: an interrupted tokenize
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"mixture dataset 2 of 2 \(.*half-built\): tokenized data missing or "
                                         "incomplete"):
        main(config, str(out))
    assert not out.exists()
