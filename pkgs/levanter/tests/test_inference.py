"""The key/value-cache decoder (``levanter.inference``): greedy tokens equal the recompute path's,
sampling follows softmax(logits / T) after top-k and top-p, a request's tokens depend on its seed
alone, requests join and leave a running batch, stops and cancels end them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from levanter.generate import generate, generate_by_recompute
from levanter.inference import Engine, SamplingParams, sample_tokens
from levanter.models.llama import LlamaConfig
from testsupport.levanter_data import random_params

CONFIG = LlamaConfig(vocab_size=61, hidden_dim=32, intermediate_dim=64, num_heads=4, num_kv_heads=2,
                     num_layers=2, max_seq_len=64)
# Every engine here has 64 positions a slot and makes 4 tokens a trip, and every prompt is at most 16
# tokens (one prefill bucket): the tests share a handful of compiled programs. Those of 4 slots keep
# up to TOP alternatives a token (what a server compiles); those of one slot none (what generations
# steps compile), and give the same tokens.
LEN, STEPS, TOP = 64, 4, 5


@pytest.fixture(scope="module")
def model_and_params():
    # Drawn with numpy (Haiku's initialisers, run op by op, cost seconds of compiling).
    params = jax.tree.map(jnp.asarray, random_params(CONFIG, seed=3))
    # Sharper than near-uniform logits, so greedy ties are not what is compared.
    params["lm_head"]["w"] = params["lm_head"]["w"] * 40.0
    return CONFIG.build(), params


@pytest.fixture(scope="module")
def recomputed(model_and_params):
    """``prompt -> its greedy continuation by the recompute path to the end of the context``, each
    prompt's once a module. One buffer length for every prompt (one program); a shorter greedy run
    makes the first tokens of this one (the next token never depends on how many more may follow)."""
    _, params = model_and_params
    done: dict[tuple[int, ...], list[int]] = {}

    def continuation(prompt: list[int]) -> list[int]:
        if tuple(prompt) not in done:
            done[tuple(prompt)] = generate_by_recompute(CONFIG, params, prompt, max_new_tokens=LEN)
        return done[tuple(prompt)]

    return continuation


def _engine(model, params, slots: int = 4, **kwargs) -> Engine:
    kwargs.setdefault("top_logprobs", TOP if slots == 4 else 0)
    return Engine(model, params, slots=slots, max_len=LEN, steps_per_sync=STEPS, **kwargs)


def _prompts(n: int, seed: int = 0, longest: int = 16) -> list[list[int]]:
    rs = np.random.RandomState(seed)
    return [rs.randint(0, CONFIG.vocab_size, rs.randint(1, longest)).tolist() for _ in range(n)]


# The prompts the recompute path continues (``recomputed``): shared by the tests that compare with it.
# Six, for four slots: two requests wait for a slot another has left.
PROMPTS = _prompts(6)


def test_greedy_tokens_equal_the_recompute_path(model_and_params, recomputed) -> None:
    model, params = model_and_params
    # Each prompt is continued to the end of the context.
    sampling = [SamplingParams(max_tokens=LEN - len(p)) for p in PROMPTS]
    got = _engine(model, params).generate(PROMPTS, sampling)
    for prompt, completion in zip(PROMPTS, got, strict=True):
        assert completion.token_ids == recomputed(prompt)
        assert completion.finish_reason == "length"
        assert len(completion.logprobs) == LEN - len(prompt) and all(lp <= 0 for lp in completion.logprobs)
    # The single-prompt entry point runs the same decoder (asked for one trip's tokens, it builds the
    # program of the one-slot engines here).
    assert generate(CONFIG, params, PROMPTS[0], max_new_tokens=STEPS) == got[0].token_ids[:STEPS]


def test_logprobs_and_top_logprobs_are_the_models(model_and_params) -> None:
    # One engine keeps up to 5 alternatives; requests ask 5, 2 or none, greedy and sampled, side by side.
    model, params = model_and_params
    engine = _engine(model, params)
    prompts = _prompts(3, seed=8)
    asks = [(TOP, SamplingParams(max_tokens=6)), (2, SamplingParams(max_tokens=6, temperature=1.0, seed=4)),
            (0, SamplingParams(max_tokens=6))]
    requests = [engine.submit(p, s, top_logprobs=n) for p, (n, s) in zip(prompts, asks, strict=True)]
    engine.run()
    # One forward pass over every whole sequence (padded at the end: attention is causal) on the
    # CPU, apart from the decoder.
    sequences = [r.prompt_ids + r.completion.token_ids for r in requests]
    padded = np.zeros((len(sequences), max(map(len, sequences))), np.int32)
    for row, ids in zip(padded, sequences, strict=True):
        row[:len(ids)] = ids
    expected = np.asarray(jax.nn.log_softmax(jax.jit(model.apply)(params, None, jnp.asarray(padded)), axis=-1))
    for request, (n, _), rows, sequence in zip(requests, asks, expected, sequences, strict=True):
        done = request.completion
        rows = rows[len(request.prompt_ids) - 1:len(sequence) - 1]
        np.testing.assert_allclose(done.logprobs, rows[np.arange(6), done.token_ids], rtol=1e-4, atol=1e-5)
        if not n:
            assert done.top_logprobs == []
            continue
        assert len(done.top_logprobs) == len(done.token_ids) == 6 and all(len(t) == n for t in done.top_logprobs)
        for top, row in zip(done.top_logprobs, rows, strict=True):
            order = np.argsort(-row, kind="stable")[:n]
            assert [t for t, _ in top] == order.tolist()
            np.testing.assert_allclose([v for _, v in top], row[order], rtol=1e-4, atol=1e-5)
        if request.sampling.greedy:  # the chosen token is the likeliest, with the same log-probability
            assert [t[0][0] for t in done.top_logprobs] == done.token_ids
            assert [t[0][1] for t in done.top_logprobs] == done.logprobs
    with pytest.raises(ValueError, match=rf"top_logprobs must be in \[0, {TOP}\]"):
        engine.submit(prompts[0], SamplingParams(), top_logprobs=TOP + 1)
    with pytest.raises(ValueError, match="top_logprobs must be in"):
        _engine(model, params, top_logprobs=-1)


def test_sampling_frequencies_match_the_filtered_softmax() -> None:
    logits = jnp.asarray([2.0, 1.5, 1.0, 0.7, 0.2, -0.5, -1.0, -3.0])
    n = 20_000
    temperature, top_k, top_p = 0.8, 6, 0.9
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    draws = jax.jit(jax.vmap(lambda k: sample_tokens(logits[None], jnp.asarray([temperature]), jnp.asarray([top_k]),
                                                     jnp.asarray([top_p]), k[None])[0]))(keys)
    counts = np.bincount(np.asarray(draws), minlength=len(logits))
    # The distribution the settings describe, computed apart: top 6 by logit, then the nucleus.
    p = np.exp(np.asarray(logits) / temperature)
    p[6:] = 0.0
    p /= p.sum()
    before = np.cumsum(p) - p
    p[before >= top_p] = 0.0
    p /= p.sum()
    assert np.all(counts[p == 0] == 0), (counts, p)
    support = p > 0
    assert support.sum() >= 3
    assert stats.chisquare(counts[support], p[support] * n).pvalue > 0.01


def test_temperature_zero_rows_are_greedy_beside_sampled_ones() -> None:
    logits = jnp.asarray(np.random.default_rng(1).standard_normal((4, 50)), jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(2), 4)
    # Jitted: one program, not one per operation.
    out = jax.jit(sample_tokens)(logits, jnp.asarray([0.0, 1.0, 0.0, 2.0]), jnp.asarray([0, 0, 5, 0]),
                                 jnp.asarray([1.0, 0.5, 1.0, 1.0]), keys)
    assert int(out[0]) == int(jnp.argmax(logits[0])) and int(out[2]) == int(jnp.argmax(logits[2]))


def test_a_seed_decides_the_tokens_whatever_shares_the_batch(model_and_params) -> None:
    model, params = model_and_params
    prompts = _prompts(6, seed=1)
    sampling = [SamplingParams(max_tokens=12, temperature=1.0, top_p=0.95, top_k=30, seed=s) for s in range(6)]
    # Asking for alternatives, beside others, changes no token; nor does an engine that keeps none.
    wide = _engine(model, params).generate(prompts, sampling, top_logprobs=2)
    alone = [_engine(model, params, slots=1).generate([p], s)[0] for p, s in zip(prompts[:3], sampling, strict=False)]
    assert [c.token_ids for c in alone] == [c.token_ids for c in wide[:3]]
    other_seed = _engine(model, params, slots=1).generate(
        [prompts[0]], SamplingParams(max_tokens=12, temperature=1.0, top_p=0.95, top_k=30, seed=99))
    assert other_seed[0].token_ids != wide[0].token_ids


def test_requests_join_and_leave_a_running_batch(model_and_params, recomputed) -> None:
    model, params = model_and_params
    engine = _engine(model, params)
    first = engine.submit(PROMPTS[0], SamplingParams(max_tokens=20))
    engine.step()
    assert len(first.completion.token_ids) == 1 + STEPS  # the prefill's token and one trip
    late = [engine.submit(p, SamplingParams(max_tokens=6)) for p in PROMPTS[1:]]
    engine.step()  # three join beside the first (four slots), two wait
    busy = [r for r in late if r.completion.token_ids]
    assert len(busy) == 3 and len(first.completion.token_ids) == 1 + 2 * STEPS
    engine.run()
    for request in [first, *late]:
        alone = recomputed(request.prompt_ids)[:request.sampling.max_tokens]
        assert request.completion.token_ids == alone and request.completion.finish_reason == "length"


def test_stop_tokens_stop_strings_and_cancel(model_and_params, recomputed) -> None:
    model, params = model_and_params
    prompt = PROMPTS[1]
    free = recomputed(prompt)[:30]
    stop_id = free[5]
    first_hit = free.index(stop_id)
    engine = _engine(model, params, decode_text=lambda ids: "".join(chr(65 + i % 26) + str(i) for i in ids))
    by_token = engine.generate([prompt], SamplingParams(max_tokens=30, stop_token_ids=(stop_id,)))[0]
    assert by_token.token_ids == free[:first_hit + 1] and by_token.finish_reason == "stop"
    marker = chr(65 + free[7] % 26) + str(free[7])
    by_text = engine.generate([prompt], SamplingParams(max_tokens=30, stop=(marker,)))[0]
    full_text = "".join(chr(65 + i % 26) + str(i) for i in free)
    assert by_text.finish_reason == "stop" and by_text.text == full_text[:full_text.index(marker)]
    assert by_text.token_ids == free[:len(by_text.token_ids)] and len(by_text.token_ids) <= 8
    request = engine.submit(prompt, SamplingParams(max_tokens=30))
    engine.step()
    engine.cancel(request)
    engine.step()
    assert request.completion.finish_reason == "cancelled" and not engine.busy
    assert len(request.completion.token_ids) < 30


@pytest.mark.parametrize(("prompt_len", "max_tokens", "message"), [
    (0, 4, "at least one token"), (60, 5, "exceed the context of 64"), (3, 70, "exceed the context")])
def test_requests_that_cannot_fit_are_refused(model_and_params, prompt_len, max_tokens, message) -> None:
    model, params = model_and_params
    engine = _engine(model, params, slots=1)
    with pytest.raises(ValueError, match=message):
        engine.submit([1] * prompt_len, SamplingParams(max_tokens=max_tokens))


@pytest.mark.parametrize(("field", "value"), [("temperature", -1.0), ("top_p", 0.0), ("top_k", -2),
                                              ("max_tokens", 0), ("seed", -1), ("stop", ("",))])
def test_bad_sampling_settings_are_named(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})
