"""The fused greedy head (``levanter.ops.pallas_head.greedy_head``, in Pallas' interpreter here): the
argmax, max logit and log-sum-exp of the float32 logits, in both layouts of the head, with a last
vocabulary tile that overhangs the head (the interpreter fills the overhang with NaN, so a missing mask
shows), the lowest id of equal maxima, bfloat16 inputs; and a decode loop that takes it where every
slot is greedy gives the plain head's tokens and log-probabilities, and takes it only there."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.inference import Engine, SamplingParams, device
from levanter.models.impl import DecodeHead, Impl
from levanter.models.llama import LlamaConfig
from levanter.ops.pallas_head import greedy_head
from testsupport.levanter_data import random_params

TILE = 128


def _problem(rows: int, d: int, vocab: int, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Standard normal hidden states ``[rows, d]`` and head ``[d, vocab]`` (drawn with numpy)."""
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.standard_normal((rows, d)), jnp.float32),
            jnp.asarray(rng.standard_normal((d, vocab)), jnp.float32))


@jax.jit
def _reference(hidden: jax.Array, head: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    logits = jnp.dot(hidden, head, preferred_element_type=jnp.float32)
    return jnp.argmax(logits, axis=-1), jnp.max(logits, axis=-1), jax.nn.logsumexp(logits, axis=-1)


def _kernel(hidden: jax.Array, head: jax.Array, vocab_rows: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The kernel on ``head [d, vocab]`` given in the layout ``vocab_rows`` names."""
    stored = head.T if vocab_rows else head
    return jax.jit(lambda h, w: greedy_head(h, w, vocab_rows=vocab_rows, tile_vocab=TILE, interpret=True))(hidden, stored)


@pytest.mark.parametrize(("vocab_rows", "dtype", "vocab"), [
    (False, jnp.float32, 300), (True, jnp.float32, 300), (False, jnp.bfloat16, 300), (True, jnp.bfloat16, 300),
    (False, jnp.float32, 256), (True, jnp.bfloat16, 256)],
    ids=["d_vocab-f32", "vocab_d-f32", "d_vocab-bf16", "vocab_d-bf16", "d_vocab-f32-whole_tiles",
         "vocab_d-bf16-whole_tiles"])
def test_token_logit_and_lse_are_the_float32_logits(vocab_rows: bool, dtype, vocab: int) -> None:
    # 300 columns: three tiles, the last overhanging the head by 84.
    hidden, head = (a.astype(dtype) for a in _problem(5, 32, vocab))
    token, logit, lse = _kernel(hidden, head, vocab_rows)
    want = _reference(hidden, head)
    assert token.dtype == jnp.int32 and logit.dtype == lse.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(token), np.asarray(want[0]))
    np.testing.assert_allclose(np.asarray(logit), np.asarray(want[1]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want[2]), rtol=1e-6)


@pytest.mark.parametrize("vocab_rows", [False, True], ids=["d_vocab", "vocab_d"])
@pytest.mark.parametrize("tied", [(3, 100), (100, 290), (260, 299)], ids=["one_tile", "two_tiles", "last_tile"])
def test_of_equal_maxima_the_lowest_id_wins(vocab_rows: bool, tied: tuple[int, int]) -> None:
    hidden, head = _problem(6, 32, 300, seed=1)
    # Two equal columns whose logit (100 x a positive coordinate) is every row's largest.
    hidden = hidden.at[:, 0].set(jnp.abs(hidden[:, 0]) + 1.0)
    column = jnp.zeros((32,), jnp.float32).at[0].set(100.0)
    head = head.at[:, tied[0]].set(column).at[:, tied[1]].set(column)
    token, logit, _ = _kernel(hidden, head, vocab_rows)
    np.testing.assert_array_equal(np.asarray(token), np.full(6, tied[0]))
    np.testing.assert_allclose(np.asarray(logit), 100.0 * np.asarray(hidden[:, 0]), rtol=1e-6)


def test_bad_tiles_and_shapes_are_named() -> None:
    hidden, head = _problem(2, 32, 300)
    with pytest.raises(ValueError, match="tile_vocab must be a positive multiple of 128, got 100"):
        greedy_head(hidden, head, tile_vocab=100, interpret=True)
    with pytest.raises(ValueError, match="hidden states of width 32"):
        greedy_head(hidden, head, vocab_rows=True, interpret=True)


# --------------------------------------------------------------------------- in the decode loop

CONFIG = LlamaConfig(vocab_size=61, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=64)
PROMPTS = [list(range(3, 11)), [5, 9, 2], [40, 41, 42, 43, 44, 45]]


def _params(config: LlamaConfig) -> dict:
    params = jax.tree.map(jnp.asarray, random_params(config, seed=5))
    head = ("embed", "embeddings") if config.tie_embeddings else ("lm_head", "w")
    # Sharper than near-uniform logits, so greedy ties are not what is compared.
    params[head[0]][head[1]] = params[head[0]][head[1]] * 40.0
    return params


def _engine(config: LlamaConfig, params: dict, head: DecodeHead, top_logprobs: int = 0) -> Engine:
    return Engine(config.build(impl=Impl(decode_head=head)), params, slots=3, max_len=32, steps_per_sync=4,
                  top_logprobs=top_logprobs)


@pytest.mark.parametrize("tied", [False, True], ids=["lm_head", "tied"])
def test_the_fused_head_decodes_the_plain_heads_tokens_and_logprobs(tied: bool) -> None:
    config = dataclasses.replace(CONFIG, tie_embeddings=tied)
    params = _params(config)
    sampling = SamplingParams(max_tokens=10)
    got = {head: _engine(config, params, head).generate(PROMPTS, sampling) for head in (DecodeHead.PLAIN,
                                                                                      DecodeHead.FUSED)}
    plain, fused = got[DecodeHead.PLAIN], got[DecodeHead.FUSED]
    assert [len(c.token_ids) for c in plain] == [10, 10, 10]
    assert [c.token_ids for c in fused] == [c.token_ids for c in plain]
    for f, p in zip(fused, plain, strict=True):
        np.testing.assert_allclose(f.logprobs, p.logprobs, rtol=1e-5, atol=1e-6)


def test_the_fused_head_runs_only_where_every_slot_is_greedy_and_wants_no_alternatives(monkeypatch) -> None:
    # The kernel swapped for one that is off by one token: where the loop takes it, the tokens change.
    def off_by_one(hidden, head, **kwargs):
        token, logit, lse = greedy_head(hidden, head, **kwargs)
        return (token + 1) % CONFIG.vocab_size, logit, lse

    params = _params(CONFIG)
    greedy = SamplingParams(max_tokens=6)
    plain = [c.token_ids for c in _engine(CONFIG, params, DecodeHead.PLAIN).generate(PROMPTS, greedy)]
    monkeypatch.setattr(device, "greedy_head", off_by_one)
    engine = _engine(CONFIG, params, DecodeHead.FUSED, top_logprobs=2)

    def run(asks: list[tuple[SamplingParams, int]]) -> list[list[int]]:
        requests = [engine.submit(p, s, top_logprobs=n) for p, (s, n) in zip(PROMPTS, asks, strict=True)]
        engine.run()
        return [r.completion.token_ids for r in requests]

    # The first token comes from the prefill (the plain head); the decode loop makes the rest.
    swapped = run([(greedy, 0)] * 3)
    assert all(s[0] == p[0] and s[1:] != p[1:] for s, p in zip(swapped, plain, strict=True))
    assert run([(greedy, 0), (greedy, 1), (greedy, 0)]) == plain
    sampled = run([(greedy, 0), (greedy, 0), (SamplingParams(max_tokens=6, temperature=1.0, seed=1), 0)])
    assert sampled[:2] == plain[:2]


def test_auto_takes_the_fused_head_on_a_tpu_for_two_slots_or_more(monkeypatch) -> None:
    def resolved(head: DecodeHead, slots: int) -> bool:
        return device._fused_head(Impl(decode_head=head), slots)

    assert not resolved(DecodeHead.AUTO, 64)  # this CPU
    assert resolved(DecodeHead.FUSED, 1) and not resolved(DecodeHead.PLAIN, 64)
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert resolved(DecodeHead.AUTO, 64) and resolved(DecodeHead.AUTO, 2)
    assert not resolved(DecodeHead.AUTO, 1) and not resolved(DecodeHead.PLAIN, 64)
