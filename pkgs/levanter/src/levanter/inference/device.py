"""The decoder's programs on the device: a slot cache of fixed size, a prefill that puts one prompt
into a slot, and a decode loop that advances every busy slot by up to ``steps`` tokens without
coming back to the host (``jax.lax.while_loop``). Compiled once per prompt-length bucket and once
for the loop; the host side is :mod:`levanter.inference.engine`.

A loop step where every active slot is greedy and none asks for alternatives makes its tokens with
the fused greedy head where the model's ``Impl.decode_head`` resolves to ``FUSED`` (by default on a
TPU, for two slots or more): each slot's argmax and log-sum-exp by a Pallas kernel over the head's
weights as stored (:func:`levanter.ops.pallas_head.greedy_head`), no float32 logits written to HBM. Any other step
(or ``PLAIN``) makes the logits with XLA and samples from them; the greedy tokens are the same
(unless two logits lie within float32 rounding of each other)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from levanter.inference.sampling import MAX_STOP_IDS, sample_tokens, token_key, top_logprobs
from levanter.models.impl import DecodeHead, Impl
from levanter.models.vocab import stored_head
from levanter.ops.pallas_head import greedy_head

__all__ = ["Slots", "decode_steps", "empty_slots", "prefill"]


class Slots(NamedTuple):
    """Every slot's state: its cache rows, the token to feed next and where, and its sampling."""

    cache: Any
    """The model's key/value cache, one row per slot."""
    token: jax.Array
    """[slots] the last token, fed at the next step."""
    position: jax.Array
    """[slots] the position ``token`` goes to."""
    active: jax.Array
    """[slots] whether the slot still generates."""
    remaining: jax.Array
    """[slots] tokens it may still generate."""
    generated: jax.Array
    """[slots] tokens it has generated (the index of its next token's key)."""
    seed: jax.Array
    """[slots] uint32 seeds."""
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array
    stop_ids: jax.Array
    """[slots, MAX_STOP_IDS] stop token ids, -1 padded."""


def empty_slots(model: Any, slots: int, length: int) -> Slots:
    """``slots`` idle slots of up to ``length`` positions each."""
    def zeros(dtype: Any = jnp.int32) -> jax.Array:  # one buffer per field: the slots are donated
        return jnp.zeros((slots,), dtype)

    return Slots(model.empty_cache(slots, length), zeros(), zeros(), zeros(bool), zeros(), zeros(),
                 zeros(jnp.uint32), zeros(jnp.float32), zeros(), jnp.ones((slots,), jnp.float32),
                 jnp.full((slots, MAX_STOP_IDS), -1, jnp.int32))


def _logits(model: Any, params: Any, hidden: jax.Array) -> jax.Array:
    return jnp.dot(hidden, model.head(params), preferred_element_type=jnp.float32)


def _fused_head(impl: Impl, slots: int) -> bool:
    """Whether ``impl.decode_head`` resolves to ``FUSED`` for a loop over ``slots`` slots on this
    process's default backend: ``AUTO`` takes it on a TPU for two slots or more. One slot's logits are
    half a megabyte, nothing to save (llama_1_4b: 3.449 ms a step plain, 3.437 fused), and XLA's TPU
    compile of llama_150m's one-slot loop with both the Pallas cache writes and the fused head was
    the slowest seen (unfinished after the 20-40 s three runs left it, jax 0.10.2, where two slots,
    or one with ``Decode.FULL``, took 25 s for a whole first run)."""
    if impl.decode_head is DecodeHead.AUTO:
        return jax.default_backend() == "tpu" and slots > 1
    return impl.decode_head is DecodeHead.FUSED


def _greedy_step(model: Any, params: Any, hidden: jax.Array, top_n: int
                 ) -> tuple[jax.Array, jax.Array, tuple[jax.Array, jax.Array]]:
    """The argmax tokens of ``hidden [b, d]`` and their log-probabilities by the fused kernel, with
    what :func:`_token_logprobs` gives for alternatives no row wants (no ids; zeros less the log-partition)."""
    # The weights as stored: a cast or transposed copy would cost a step more than the logits it saves.
    w, vocab_rows = stored_head(params, model.config.tie_embeddings)
    # Off a TPU the kernel can only be interpreted (Mosaic compiles for a TPU alone).
    interpret = model.impl.interpret or jax.default_backend() != "tpu"
    token, logit, lse = greedy_head(hidden, w, vocab_rows=vocab_rows, interpret=interpret)
    none = jnp.zeros((hidden.shape[0], top_n), jnp.float32)
    return token, logit - lse, (none.astype(jnp.int32), none - lse[:, None])


def _row(x: Any, slot: jax.Array) -> Any:
    """The cache's ``[layers, 1, ...]`` rows of ``slot``."""
    return jax.tree.map(lambda a: jax.lax.dynamic_slice_in_dim(a, slot, 1, axis=1), x)


def _token_logprobs(logits: jax.Array, token: jax.Array, wanted: jax.Array, top_n: int
                    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """The log-probabilities of ``token [b]`` under float32 ``logits [b, vocab]``, and the ``top_n``
    likeliest tokens with theirs where a row of ``wanted [b]`` asks (:func:`top_logprobs`). A logit
    less its row's log-sum-exp: reductions over the logits that fuse with them, where a whole
    log_softmax wrote a second ``[b, vocab]`` array (at batch 64 and a 128k vocabulary, 33 MB of a
    decode step's ~330 MB)."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    logprob = jnp.take_along_axis(logits, token[:, None], axis=-1)[:, 0] - lse
    top_ids, top_values = top_logprobs(logits, wanted, top_n)
    return logprob, (top_ids, top_values - lse[:, None])


@functools.partial(jax.jit, static_argnums=0, static_argnames="top_n", donate_argnums=2)
def prefill(model: Any, params: Any, slots: Slots, tokens: jax.Array, length: jax.Array, slot: jax.Array,
            sampling: tuple[jax.Array, ...], *, top_n: int = 0
            ) -> tuple[Slots, jax.Array, jax.Array, tuple[jax.Array, jax.Array]]:
    """Put the prompt ``tokens [1, bucket]`` (its first ``length`` real) into ``slot`` and draw its
    first new token; returns the slots, that token, its log-probability, and the ``top_n`` most
    likely tokens there with theirs (``[top_n]`` each, see :func:`top_logprobs`)."""
    max_tokens, seed, temperature, top_k, top_p, stop_ids = sampling
    positions = jnp.arange(tokens.shape[1])[None, :]
    hidden, row = model.cached_hidden(params, tokens, positions, _row(slots.cache, slot))
    cache = jax.tree.map(lambda a, r: jax.lax.dynamic_update_slice_in_dim(a, r, slot, axis=1), slots.cache, row)
    logits = _logits(model, params, jax.lax.dynamic_index_in_dim(hidden[0], length - 1, keepdims=True))
    token = sample_tokens(logits, temperature[None], top_k[None], top_p[None], token_key(seed, 0)[None])[0]
    logprob, (top_ids, top_values) = _token_logprobs(logits, token[None], jnp.ones((1,), bool), top_n)
    done = (max_tokens <= 1) | jnp.any(stop_ids == token)

    def put(a: jax.Array, value: Any) -> jax.Array:
        return a.at[slot].set(value)

    slots = Slots(cache, put(slots.token, token), put(slots.position, length), put(slots.active, ~done),
                  put(slots.remaining, max_tokens - 1), put(slots.generated, 1), put(slots.seed, seed),
                  put(slots.temperature, temperature), put(slots.top_k, top_k), put(slots.top_p, top_p),
                  put(slots.stop_ids, stop_ids))
    return slots, token, logprob[0], (top_ids[0], top_values[0])


@functools.partial(jax.jit, static_argnums=(0, 3), static_argnames="top_n", donate_argnums=2)
def decode_steps(model: Any, params: Any, slots: Slots, steps: int, cancel: jax.Array,
                 want_top: jax.Array | None = None, *, top_n: int = 0
                 ) -> tuple[Slots, jax.Array, jax.Array, tuple[jax.Array, jax.Array]]:
    """Up to ``steps`` tokens for every active slot (``cancel [slots]`` first stops the slots the
    host ended); returns the slots, the tokens ``[steps, slots]`` (-1 where a slot made none),
    their log-probabilities, and at each the ``top_n`` most likely tokens with theirs (``[steps,
    slots, top_n]`` each, see :func:`top_logprobs`; computed in the steps where an active slot of
    ``want_top [slots]``, default all, asks). Ends early when no slot is active. A step where every
    active slot is greedy and none of them asks for alternatives takes the fused greedy head where
    ``model.impl.decode_head`` allows it (the module's docstring)."""
    slots = slots._replace(active=slots.active & ~cancel)
    want_top = jnp.ones_like(slots.active) if want_top is None else want_top
    limit = slots.cache.k.shape[2] - 1
    fused = _fused_head(model.impl, slots.token.shape[0])
    out = jnp.full((steps, slots.token.shape[0]), -1, jnp.int32)
    out_logprobs = jnp.zeros((steps, slots.token.shape[0]), jnp.float32)
    out_top = (jnp.zeros((steps, slots.token.shape[0], top_n), jnp.int32),
               jnp.zeros((steps, slots.token.shape[0], top_n), jnp.float32))

    def cond(carry: tuple[Any, ...]) -> jax.Array:
        i, s = carry[:2]
        return (i < steps) & jnp.any(s.active)

    def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        i, s, tokens, logprobs, top = carry
        position = jnp.minimum(s.position, limit)
        hidden, cache = model.cached_hidden(params, s.token[:, None], position[:, None], s.cache)
        on = s.active

        def plain(h: jax.Array) -> tuple[jax.Array, jax.Array, tuple[jax.Array, jax.Array]]:
            logits = _logits(model, params, h)
            keys = jax.vmap(token_key)(s.seed, s.generated)
            token = sample_tokens(logits, s.temperature, s.top_k, s.top_p, keys)
            return token, *_token_logprobs(logits, token, on & want_top, top_n)

        if fused:
            # With top_n = 0 no slot can ask for alternatives, whatever want_top says.
            plain_rows = (s.temperature > 0) | want_top if top_n else s.temperature > 0
            token, logprob, (top_ids, top_values) = jax.lax.cond(
                ~jnp.any(on & plain_rows), lambda h: _greedy_step(model, params, h, top_n), plain, hidden[:, 0])
        else:
            token, logprob, (top_ids, top_values) = plain(hidden[:, 0])
        top = (top[0].at[i].set(top_ids), top[1].at[i].set(top_values))
        stopped = (s.remaining <= 1) | jnp.any(s.stop_ids == token[:, None], axis=-1)
        s = s._replace(cache=cache, token=jnp.where(on, token, s.token), position=s.position + on,
                       active=on & ~stopped, remaining=s.remaining - on, generated=s.generated + on)
        tokens = tokens.at[i].set(jnp.where(on, token, -1))
        return i + 1, s, tokens, logprobs.at[i].set(jnp.where(on, logprob, 0.0)), top

    _, slots, out, out_logprobs, out_top = jax.lax.while_loop(cond, body, (jnp.int32(0), slots, out, out_logprobs,
                                                                             out_top))
    return slots, out, out_logprobs, out_top
