"""The Haiku modules of the Llama decoder (imported only when a model is built)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp

from levanter.models.llama import LlamaConfig

__all__ = ["llama_forward", "transformed_llama"]


Shard = Callable[[jax.Array, Sequence[Any]], jax.Array]
"""``shard(x, logical_axes)``: where an activation lives on the device mesh (``levanter.sharding``)."""


def _no_shard(x: jax.Array, axes: Sequence[Any]) -> jax.Array:
    return x


def _init(std: float) -> hk.initializers.Initializer:
    return hk.initializers.TruncatedNormal(stddev=std)


class _RMSNorm(hk.Module):
    def __init__(self, eps: float, name: str | None = None):
        super().__init__(name=name)
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        scale = hk.get_parameter("scale", (x.shape[-1],), jnp.float32, init=jnp.ones)
        # Normalise in float32 even under a bfloat16 policy: the mean of squares loses precision.
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * scale.astype(jnp.float32)).astype(x.dtype)


def _rotary(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotate pairs (first half, second half) of the head dimension by position-dependent angles.

    ``positions`` is ``[T]`` (shared by the batch) or ``[B, T]``.
    """
    half = x.shape[-1] // 2
    freqs = 1.0 / (theta ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = positions[..., None].astype(jnp.float32) * freqs  # [(B,) T, half]
    if angles.ndim == 2:
        angles = angles[None]
    cos = jnp.cos(angles)[:, :, None, :]
    sin = jnp.sin(angles)[:, :, None, :]
    x1 = x[..., :half].astype(jnp.float32)
    x2 = x[..., half:].astype(jnp.float32)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x.dtype)


class _Attention(hk.Module):
    def __init__(self, config: LlamaConfig, shard: Shard, name: str | None = None):
        super().__init__(name=name)
        self.c = config
        self.shard = shard

    def __call__(self, x: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
        c = self.c
        b, t, _ = x.shape
        hd, h, kvh = c.head_dim, c.num_heads, c.num_kv_heads
        std = 0.02
        q = hk.Linear(h * hd, with_bias=False, w_init=_init(std), name="q_proj")(x).reshape(b, t, h, hd)
        k = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="k_proj")(x).reshape(b, t, kvh, hd)
        v = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="v_proj")(x).reshape(b, t, kvh, hd)
        q = self.shard(q, ("batch", None, "heads", None))
        k = self.shard(k, ("batch", None, "kv_heads", None))
        v = self.shard(v, ("batch", None, "kv_heads", None))
        positions = jnp.arange(t) if segment_ids is None else _segment_positions(segment_ids)
        q = _rotary(q, positions, c.rope_theta)
        k = _rotary(k, positions, c.rope_theta)
        # Grouped-query attention: each key/value head serves num_heads / num_kv_heads query heads,
        # so the query heads are viewed as [kv_heads, group] instead of copying keys and values.
        group = h // kvh
        q = q.reshape(b, t, kvh, group, hd)
        scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) / math.sqrt(hd)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None, None]
        if segment_ids is not None:
            # Block-diagonal: a token sees only earlier tokens of its own conversation.
            same = segment_ids[:, :, None] == segment_ids[:, None, :]  # [b, q, s]
            allowed = allowed & same[:, None, None]
        scores = jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(b, t, h * hd)
        # Scale the residual-branch output init down with depth, as GPT-2 does, for stable early steps.
        out_std = std / math.sqrt(2 * c.num_layers)
        return hk.Linear(c.hidden_dim, with_bias=False, w_init=_init(out_std), name="o_proj")(out)


def _segment_positions(segment_ids: jax.Array) -> jax.Array:
    """``[B, T]`` positions counted from the start of each token's segment (packed conversations
    each start at 0, as they would alone)."""
    t = segment_ids.shape[-1]
    index = jnp.arange(t)
    starts = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], dtype=bool),
                              segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
    start_of = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - start_of


class _SwiGLU(hk.Module):
    def __init__(self, config: LlamaConfig, shard: Shard, name: str | None = None):
        super().__init__(name=name)
        self.c = config
        self.shard = shard

    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.c
        gate = hk.Linear(c.intermediate_dim, with_bias=False, w_init=_init(0.02), name="gate_proj")(x)
        up = hk.Linear(c.intermediate_dim, with_bias=False, w_init=_init(0.02), name="up_proj")(x)
        gate = self.shard(gate, ("batch", None, "mlp"))
        up = self.shard(up, ("batch", None, "mlp"))
        out_std = 0.02 / math.sqrt(2 * c.num_layers)
        return hk.Linear(c.hidden_dim, with_bias=False, w_init=_init(out_std), name="down_proj")(
            jax.nn.silu(gate) * up)


class _Block(hk.Module):
    def __init__(self, config: LlamaConfig, shard: Shard, name: str | None = None):
        super().__init__(name=name)
        self.c = config
        self.shard = shard

    def __call__(self, x: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
        x = x + _Attention(self.c, self.shard, name="attn")(_RMSNorm(self.c.norm_eps, name="attn_norm")(x), segment_ids)
        x = self.shard(x, ("batch", None, None))
        x = x + _SwiGLU(self.c, self.shard, name="mlp")(_RMSNorm(self.c.norm_eps, name="mlp_norm")(x))
        return self.shard(x, ("batch", None, None))


def llama_forward(config: LlamaConfig, tokens: jax.Array, compute_dtype: Any = jnp.float32,
                  shard: Shard | None = None, segment_ids: jax.Array | None = None) -> jax.Array:
    """Logits ``[batch, seq, vocab]`` (float32) for int tokens ``[batch, seq]``; call inside ``hk.transform``.

    With ``segment_ids`` ``[batch, seq]`` (packed conversations), attention stays inside a segment
    and rotary positions restart at each segment's first token.

    Parameters are created in float32; activations run in ``compute_dtype`` (the caller casts the
    parameters for a bfloat16 policy, see ``levanter.trainer``). ``shard`` places activations on a
    device mesh (``levanter.sharding.activation_sharder``); None leaves placement to XLA.
    """
    shard = shard or _no_shard
    embed = hk.Embed(config.vocab_size, config.hidden_dim, w_init=_init(0.02), name="embed")
    x = shard(embed(tokens).astype(compute_dtype), ("batch", None, None))
    for i in range(config.num_layers):
        x = _Block(config, shard, name=f"layer_{i}")(x, segment_ids)
    x = _RMSNorm(config.norm_eps, name="final_norm")(x)
    if config.tie_embeddings:
        logits = x @ embed.embeddings.astype(x.dtype).T
    else:
        logits = hk.Linear(config.vocab_size, with_bias=False, w_init=_init(0.02), name="lm_head")(x)
    return shard(logits, ("batch", None, "vocab")).astype(jnp.float32)


def transformed_llama(config: LlamaConfig, compute_dtype: Any = jnp.float32,
                      shard: Shard | None = None) -> hk.Transformed:
    """``init(rng, tokens)`` / ``apply(params, None, tokens, segment_ids=None)`` pair for the model
    ``config`` describes."""
    return hk.transform(lambda tokens, segment_ids=None: llama_forward(config, tokens, compute_dtype, shard,
                                                                       segment_ids))
