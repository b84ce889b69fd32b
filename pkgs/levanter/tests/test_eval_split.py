"""``levanter.eval.evaluate_split``: a split scored in batches whose last one is short gives the scores
of one whole batch, from one compiled program."""

from __future__ import annotations

import numpy as np
import pytest

from levanter import eval as lev_eval
from levanter.data.loader import split_windows
from levanter.data.tokenized import open_split
from testsupport.levanter_data import TINY_MODEL, random_params


def test_a_short_last_batch_is_padded_and_scores_as_one_whole_batch(shared_tiny_dataset: str) -> None:
    split = open_split(shared_tiny_dataset, "validation")
    windows = sum(1 for _ in split_windows(split, 33, split.is_chat, seed=0, shuffle=False, repeat=False))
    batch_size = next(b for b in range(5, windows) if windows % b)  # the last batch is short
    params = random_params(TINY_MODEL, seed=0)
    lengths = np.arange(TINY_MODEL.vocab_size) % 3  # bytes per token, so bits per byte weighs the tokens
    lev_eval._mean_loss.cache_clear()  # a fresh jitted loss: its programs are this test's

    def score(size: int) -> lev_eval.EvalResult:
        return lev_eval.evaluate_split(TINY_MODEL, params, shared_tiny_dataset, "validation", seq_len=32,
                                       batch_size=size, byte_lengths=lengths)

    batched = score(batch_size)
    # The short last batch was padded to the batch's shape: one program scored every batch.
    assert lev_eval._mean_loss(TINY_MODEL)._cache_size() == 1
    whole = score(windows)  # every window in one batch, nothing padded
    assert (batched.tokens, batched.bytes) == (whole.tokens, whole.bytes) == (windows * 32, int(batched.bytes))
    assert batched.loss == pytest.approx(whole.loss, rel=1e-6)
    assert batched.bits_per_byte == pytest.approx(whole.bits_per_byte, rel=1e-6)
