"""Chat windows: the loss counts mask-on targets only, and packed conversations never meet."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.data.chat import decode_chat_record, encode_chat_record, loss_weights, pad_window
from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.models.vocab import extend_vocab
from levanter.trainer import loss_fn
from testsupport.accumulation import WINDOW, one_step, unequal_windows
from testsupport.levanter_data import random_params

CONFIG = LlamaConfig(vocab_size=50, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=1,
                     num_layers=2, max_seq_len=64)
MODEL = transformed_llama(CONFIG)
RNG = np.random.default_rng(0)


def _conversation(n_user: int, n_assistant: int, tail: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Ids and mask: user tokens (off), assistant tokens (on), then ``tail`` closing tokens (off)."""
    n = n_user + n_assistant + tail
    ids = RNG.integers(1, CONFIG.vocab_size, size=n)
    mask = np.zeros(n, dtype=np.int64)
    mask[n_user:n_user + n_assistant] = 1
    return ids, mask


def _window(conversations, window: int) -> np.ndarray:
    return pad_window(decode_chat_record(encode_chat_record(conversations)), window)


# Drawn with numpy (no init to compile: eager JAX compiles every operation of Haiku's init on its
# own, a jitted one is a program of its own); made once a process.
@functools.cache
def _params():
    return jax.tree.map(jnp.asarray, random_params(CONFIG))


_loss = jax.jit(lambda params, batch: loss_fn(MODEL, params, batch, jnp.float32))


def test_records_round_trip_ids_mask_and_segments() -> None:
    a, b = _conversation(3, 4), _conversation(2, 2, tail=2)
    rows = decode_chat_record(encode_chat_record([a, b]))
    np.testing.assert_array_equal(rows[0], np.concatenate([a[0], b[0]]))
    np.testing.assert_array_equal(rows[1], np.concatenate([a[1], b[1]]))
    np.testing.assert_array_equal(rows[2], [1] * 8 + [2] * 6)
    with pytest.raises(ValueError, match="does not fit a window of 10"):
        pad_window(rows, 10)


def test_changing_a_mask_off_token_leaves_the_parameters_after_one_step_bit_for_bit_unchanged() -> None:
    a, b = _conversation(4, 5, tail=2), _conversation(3, 6)
    window = _window([a, b], WINDOW + 1)
    changed = window.copy()
    # The last token of the first conversation is a mask-off target; as an input it could only
    # reach later tokens of its own conversation (there are none), never the next conversation.
    last = len(a[0]) - 1
    assert changed[1, last] == 0
    changed[0, last] = (changed[0, last] + 7) % CONFIG.vocab_size
    # Padding ids (segment 0) are never targets either.
    assert changed[2, -1] == 0
    changed[0, -1] = 3

    def step(w: np.ndarray) -> dict[str, np.ndarray]:
        # SGD at rate 1 (the update is minus the gradient), with z-loss: the accumulation test's
        # step and batch shape, so the process compiles one program for both tests.
        return one_step(np.stack([w] * 4), 1)[0]

    after_a, after_b = step(window), step(changed)
    for key, value in after_a.items():
        np.testing.assert_array_equal(after_b[key], value, err_msg=key)
    # ... while changing a mask-on target does change them (the comparison above can fail).
    on = int(np.flatnonzero(window[1])[0])
    moved = window.copy()
    moved[0, on] = (moved[0, on] + 7) % CONFIG.vocab_size
    assert not np.array_equal(after_a["embed/embeddings"], step(moved)["embed/embeddings"])


def test_a_packed_window_has_the_loss_of_its_conversations_run_one_by_one() -> None:
    params = _params()
    convs = [_conversation(5, 7), _conversation(3, 9, tail=2), _conversation(6, 4)]
    packed = _window(convs, 48)[None]
    mean = float(_loss(params, jnp.asarray(packed)))
    total, count = 0.0, 0
    for ids, mask in convs:
        alone = _window([(ids, mask)], 48)[None]
        targets = int(mask[1:].sum())
        total += float(_loss(params, jnp.asarray(alone))) * targets
        count += targets
    assert count == int(packed[0, 1, 1:].sum())
    assert mean == pytest.approx(total / count, rel=1e-5, abs=1e-6)
    # Without segments (one long document) the loss differs: the test can tell the two apart.
    merged = packed.copy()
    merged[0, 2, :] = 1
    assert float(_loss(params, jnp.asarray(merged))) != pytest.approx(mean, rel=1e-5)


def test_extending_the_vocabulary_keeps_every_old_row_and_the_old_logits() -> None:
    params = _params()
    bigger = extend_vocab(params, CONFIG.vocab_size + 3)
    np.testing.assert_array_equal(np.asarray(bigger["embed"]["embeddings"][:CONFIG.vocab_size]),
                                  np.asarray(params["embed"]["embeddings"]))
    np.testing.assert_array_equal(np.asarray(bigger["lm_head"]["w"][:, :CONFIG.vocab_size]),
                                  np.asarray(params["lm_head"]["w"]))
    assert bigger["embed"]["embeddings"].shape[0] == CONFIG.vocab_size + 3
    tokens = jnp.asarray(RNG.integers(0, CONFIG.vocab_size, size=(1, 12)), jnp.int32)
    big_model = transformed_llama(LlamaConfig(**{**CONFIG.__dict__, "vocab_size": CONFIG.vocab_size + 3}))
    np.testing.assert_allclose(np.asarray(jax.jit(big_model.apply)(bigger, None, tokens)[..., :CONFIG.vocab_size]),
                               np.asarray(jax.jit(MODEL.apply)(params, None, tokens)), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="smaller than the model's 50"):
        extend_vocab(params, 40)


def test_accumulated_micro_batches_weigh_by_their_targets_as_the_whole_batch_does() -> None:
    # One micro-batch holds 52 loss targets (two packed conversations a row), the other 4: the
    # whole batch's objective is the mean over its 56 targets, whatever grad_accum splits it into.
    windows = unequal_windows()
    assert [int(loss_weights(windows[r::2]).sum()) for r in (0, 1)] == [52, 4]
    whole, whole_metrics = one_step(windows, 1)
    split, split_metrics = one_step(windows, 2)
    # SGD at rate 1: the step moved every parameter by minus the gradient, so the parameters
    # compare the gradients (within float32 rounding of two summation orders).
    for key, value in whole.items():
        np.testing.assert_allclose(split[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    for name in ("loss", "z_loss", "grad_norm"):
        assert split_metrics[name] == pytest.approx(whole_metrics[name], rel=1e-5), name
    assert "_weight" not in split_metrics
