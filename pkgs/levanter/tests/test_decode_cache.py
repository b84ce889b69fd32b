"""The decoder's key/value cache, read and written the fast ways (``levanter.models.impl.Decode``):
a live read reads only its bucket of the cache and attends as the full read does; the Pallas
kernel (in Pallas' interpreter here) writes what XLA's batched update writes; and greedy tokens are
the same whichever way the decoder reads and writes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.inference import Engine, SamplingParams
from levanter.models.impl import Decode, Impl
from levanter.models.llama import LlamaConfig
from levanter.ops.attention import cached_attention, live_buckets
from levanter.ops.kv_cache import write_rows


def _attention_inputs(b: int, t: int, s: int, seed: int = 0):
    kq, kk, kv, kc, kd = jax.random.split(jax.random.PRNGKey(seed), 5)
    q = jax.random.normal(kq, (b, t, 2, 2, 8))
    k, v = jax.random.normal(kk, (b, t, 2, 8)), jax.random.normal(kv, (b, t, 2, 8))
    return q, k, v, jax.random.normal(kc, (b, s, 2, 8)), jax.random.normal(kd, (b, s, 2, 8))


def test_live_buckets_double_from_the_smallest_to_the_whole() -> None:
    assert live_buckets(64, 8) == [8, 16, 32, 64]
    assert live_buckets(40, 8) == [8, 16, 32, 40]
    assert live_buckets(8, 8) == [8]


@pytest.mark.parametrize("longest", [3, 16, 17, 60])
def test_a_live_read_reads_only_its_bucket_and_attends_as_the_full_read(longest: int) -> None:
    q, k, v, k_cache, v_cache = _attention_inputs(b=3, t=1, s=64)
    positions = jnp.asarray([[longest], [1], [longest // 2]])
    full = cached_attention(q, k, v, k_cache, v_cache, positions)
    # Past the bucket that holds every row's positions, the cache holds NaN: a read of it would
    # make the output NaN (0 x NaN in the weighted sum of values), masked or not.
    bucket = next(n for n in live_buckets(64, 8) if n >= longest)
    poisoned = [c.at[:, bucket:].set(jnp.nan) for c in (k_cache, v_cache)]
    live = jax.jit(functools.partial(cached_attention, live=True, smallest=8))(q, k, v, poisoned[0], poisoned[1],
                                                                                positions)
    np.testing.assert_allclose(np.asarray(live), np.asarray(full), rtol=1e-5, atol=1e-6)
    if bucket < 64:
        assert np.isnan(np.asarray(cached_attention(q, k, v, poisoned[0], poisoned[1], positions))).all()


def test_the_kernel_writes_what_xla_writes() -> None:
    t = 3
    cache = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 16, 2, 8)).astype(jnp.bfloat16)
    new = jax.random.normal(jax.random.PRNGKey(2), (2, 4, t, 2, 8))
    starts = jnp.asarray([0, 5, 16 - t, 15], jnp.int32)  # the last one past the end: moved back
    xla = write_rows(cache, new, starts)
    kernel = jax.jit(lambda c, n, s: write_rows(c, n, s, kernel=True, interpret=True))(cache, new, starts)
    assert kernel.dtype == cache.dtype
    np.testing.assert_array_equal(np.asarray(kernel, np.float32), np.asarray(xla, np.float32))
    assert not np.array_equal(np.asarray(xla, np.float32), np.asarray(cache, np.float32))


CONFIG = LlamaConfig(vocab_size=61, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=256)


def test_greedy_tokens_are_the_same_however_the_cache_is_read_and_written() -> None:
    # 256 positions a slot and prompts of 120-odd tokens: the live read goes from its 128-position
    # bucket to the whole cache as the rows pass position 128.
    params = CONFIG.build().init(jax.random.PRNGKey(3), jnp.zeros((1, 8), jnp.int32))
    params["lm_head"]["w"] = params["lm_head"]["w"] * 40.0
    rs = np.random.RandomState(0)
    prompts = [rs.randint(0, CONFIG.vocab_size, n).tolist() for n in (121, 126, 118)]
    sampling = SamplingParams(max_tokens=16)
    got = {}
    for decode in (Decode.FULL, Decode.LIVE, Decode.PALLAS):
        model = CONFIG.build(impl=Impl(decode=decode, interpret=True))
        engine = Engine(model, params, slots=2, max_len=256, steps_per_sync=8)
        got[decode] = [c.token_ids for c in engine.generate(prompts, sampling)]
    assert all(len(ids) == 16 for ids in got[Decode.FULL])
    assert got[Decode.LIVE] == got[Decode.FULL]
    assert got[Decode.PALLAS] == got[Decode.FULL]
