"""The decoder's key/value cache, read and written the fast ways (``levanter.models.impl.Decode``):
a live read reads only its bucket of the cache and attends as the full read does; the Pallas
kernel (in Pallas' interpreter here) writes what XLA's batched update writes; and greedy tokens are
the same whichever way the decoder reads and writes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.inference import Engine, SamplingParams
from levanter.models.impl import Decode, Impl
from levanter.models.llama import LlamaConfig
from levanter.ops.attention import cached_attention, live_buckets
from levanter.ops.kv_cache import write_rows
from testsupport.levanter_data import random_params

CONFIG = LlamaConfig(vocab_size=61, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=256)


@pytest.fixture(scope="module")
def params():
    # Drawn with numpy (Haiku's initialisers, run op by op, cost seconds of compiling).
    params = jax.tree.map(jnp.asarray, random_params(CONFIG, seed=3))
    # Sharper than near-uniform logits, so greedy ties are not what is compared.
    params["lm_head"]["w"] = params["lm_head"]["w"] * 40.0
    return params


def _normal(rng: np.random.Generator, *shape: int, dtype=jnp.float32) -> jax.Array:
    """Standard normal values drawn with numpy (JAX's sampler, eager, compiles a program per shape)."""
    return jnp.asarray(rng.standard_normal(shape), dtype)


def _attention_inputs(b: int, t: int, s: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k, v = _normal(rng, b, t, 2, 2, 8), _normal(rng, b, t, 2, 8), _normal(rng, b, t, 2, 8)
    return q, k, v, _normal(rng, b, s, 16), _normal(rng, b, s, 16)


def _reference(q, k, v, k_cache, v_cache, positions) -> np.ndarray:
    """Each row's query over its cached positions before its own and the new key, one row at a time
    (in numpy, float64: no program to compile for each row's length)."""
    q, k, v, k_cache, v_cache = (np.asarray(a, np.float64) for a in (q, k, v, k_cache, v_cache))
    out = []
    for r in range(q.shape[0]):
        n = int(positions[r, 0])
        keys = np.concatenate([k_cache[r, :n].reshape(n, 2, 8), k[r]])  # [n + 1, kv, d]
        values = np.concatenate([v_cache[r, :n].reshape(n, 2, 8), v[r]])
        scores = np.einsum("kgd,skd->kgs", q[r, 0], keys) / np.sqrt(8)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out.append(np.einsum("kgs,skd->kgd", probs, values).reshape(-1))
    return np.stack(out)[:, None]


def test_live_buckets_double_from_the_smallest_to_the_whole() -> None:
    assert live_buckets(64, 8) == [8, 16, 32, 64]
    assert live_buckets(40, 8) == [8, 16, 32, 40]
    assert live_buckets(8, 8) == [8]
    assert live_buckets(256) == [128, 256]


def test_cached_attention_is_each_rows_attention_over_its_earlier_positions() -> None:
    q, k, v, k_cache, v_cache = _attention_inputs(b=3, t=1, s=24)
    positions = jnp.asarray([[0], [7], [24]])
    got = jax.jit(cached_attention)(q, k, v, k_cache, v_cache, positions)
    np.testing.assert_allclose(np.asarray(got), _reference(q, k, v, k_cache, v_cache, positions), rtol=1e-5, atol=1e-6)


def test_a_live_read_reads_only_its_bucket_and_attends_as_the_full_read(params) -> None:
    rng = np.random.default_rng(4)
    clean = jax.tree.map(lambda c: rng.standard_normal(c.shape, np.float32), CONFIG.build().empty_cache(2, 256))
    # Past the first bucket (128 positions) the cache holds NaN: a read of it would make the
    # output NaN (0 x NaN in the weighted sum of values), masked or not.
    poisoned = jax.tree.map(lambda c: np.concatenate([c[:, :, :128], np.full_like(c[:, :, 128:], np.nan)], axis=2), clean)
    # The first row reads positions 0-127, the whole first bucket; the second, one position.
    tokens, positions = jnp.asarray([[5], [7]]), jnp.asarray([[128], [1]])

    read = {decode: jax.jit(CONFIG.build(impl=Impl(decode=decode)).cached_hidden) for decode in (Decode.LIVE, Decode.FULL)}

    def hidden(decode: Decode, cache):
        return read[decode](params, tokens, positions, cache)[0]

    live = hidden(Decode.LIVE, poisoned)
    np.testing.assert_allclose(np.asarray(live), np.asarray(hidden(Decode.FULL, clean)), rtol=1e-5, atol=1e-5)
    assert np.isnan(np.asarray(hidden(Decode.FULL, poisoned))).all()


def test_the_kernel_writes_what_xla_writes() -> None:
    # Tiles of 8 positions: a token at a tile's start, inside one, at the end; a start past the
    # end is moved back to it.
    rng = np.random.default_rng(1)
    cache, new = _normal(rng, 2, 5, 24, 16, dtype=jnp.bfloat16), _normal(rng, 2, 5, 1, 16)
    starts = jnp.asarray([0, 5, 9, 23, 30], jnp.int32)
    xla = jax.jit(write_rows)(cache, new, starts)
    kernel = jax.jit(lambda c, n, s: write_rows(c, n, s, kernel=True, interpret=True))(cache, new, starts)
    assert kernel.dtype == cache.dtype
    np.testing.assert_array_equal(np.asarray(kernel, np.float32), np.asarray(xla, np.float32))
    assert not np.array_equal(np.asarray(xla, np.float32), np.asarray(cache, np.float32))


def test_greedy_tokens_are_the_same_however_the_cache_is_read_and_written(params) -> None:
    # 256 positions a slot and prompts of 120-odd tokens: the live read goes from its 128-position
    # bucket to the whole cache as the rows pass position 128.
    rs = np.random.RandomState(0)
    prompts = [rs.randint(0, CONFIG.vocab_size, n).tolist() for n in (121, 126, 118)]
    sampling = SamplingParams(max_tokens=16)
    got = {}
    for decode in (Decode.FULL, Decode.LIVE, Decode.PALLAS):
        model = CONFIG.build(impl=Impl(decode=decode))  # pallas: interpreted off a TPU
        engine = Engine(model, params, slots=2, max_len=256, steps_per_sync=8)
        got[decode] = [c.token_ids for c in engine.generate(prompts, sampling)]
    assert all(len(ids) == 16 for ids in got[Decode.FULL])
    assert got[Decode.LIVE] == got[Decode.FULL]
    assert got[Decode.PALLAS] == got[Decode.FULL]
