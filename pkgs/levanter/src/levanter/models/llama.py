"""A Llama-style decoder in Haiku: RMSNorm, rotary embeddings, SwiGLU, grouped-query causal attention."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp

__all__ = ["LlamaConfig", "llama_forward", "transformed_llama"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama decoder.

    ``vocab_size`` is a default only: the trainer replaces it with the vocabulary size recorded by
    the tokenized data (``index.json``) so one preset serves any tokenizer.
    """

    vocab_size: int = 4096
    """Number of token ids (replaced by the data's vocabulary size at training time)."""
    hidden_dim: int = 32
    """Width of the residual stream."""
    intermediate_dim: int = 128
    """Width of the SwiGLU hidden layer."""
    num_heads: int = 2
    """Number of query heads; ``hidden_dim`` must be divisible by it."""
    num_kv_heads: int = 2
    """Number of key/value heads (grouped-query attention); must divide ``num_heads``."""
    num_layers: int = 2
    """Number of transformer blocks."""
    max_seq_len: int = 512
    """Longest context the model is meant for (RoPE has no table, so the trainer may extend it)."""
    rope_theta: float = 10000.0
    """Base of the rotary embedding frequencies."""
    norm_eps: float = 1e-5
    """Epsilon inside RMSNorm."""
    tie_embeddings: bool = False
    """Use the input embedding matrix as the output projection."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_dim", "intermediate_dim", "num_heads", "num_kv_heads",
                     "num_layers", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim must be divisible by num_heads, got hidden_dim={self.hidden_dim} "
                f"and num_heads={self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads must be divisible by num_kv_heads, got num_heads={self.num_heads} "
                f"and num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim (hidden_dim / num_heads) must be even for RoPE, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_dim // self.num_heads

    def num_params(self) -> int:
        """Exact number of parameters of the model this config describes."""
        d, kv = self.hidden_dim, self.num_kv_heads * self.head_dim
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * self.intermediate_dim + 2 * d
        head = 0 if self.tie_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * per_layer + d + head

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward and backward) per token at context ``seq_len``.

        6 FLOPs per matmul weight (the output projection included, embedding lookups excluded) plus
        the attention score and value products, 12 * layers * hidden * seq_len, with no discount
        for the causal mask (the usual MFU convention).
        """
        d, kv = self.hidden_dim, self.num_kv_heads * self.head_dim
        matmul = self.num_layers * (2 * d * d + 2 * d * kv + 3 * d * self.intermediate_dim)
        matmul += d * self.vocab_size
        return 6.0 * matmul + 12.0 * self.num_layers * d * seq_len


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
    """Rotate pairs (first half, second half) of the head dimension by position-dependent angles."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (theta ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = positions[:, None].astype(jnp.float32) * freqs[None, :]  # [T, half]
    cos = jnp.cos(angles)[None, :, None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    x1 = x[..., :half].astype(jnp.float32)
    x2 = x[..., half:].astype(jnp.float32)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x.dtype)


class _Attention(hk.Module):
    def __init__(self, config: LlamaConfig, name: str | None = None):
        super().__init__(name=name)
        self.c = config

    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.c
        b, t, _ = x.shape
        hd, h, kvh = c.head_dim, c.num_heads, c.num_kv_heads
        std = 0.02
        q = hk.Linear(h * hd, with_bias=False, w_init=_init(std), name="q_proj")(x).reshape(b, t, h, hd)
        k = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="k_proj")(x).reshape(b, t, kvh, hd)
        v = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="v_proj")(x).reshape(b, t, kvh, hd)
        positions = jnp.arange(t)
        q = _rotary(q, positions, c.rope_theta)
        k = _rotary(k, positions, c.rope_theta)
        # Grouped-query attention: each key/value head serves num_heads / num_kv_heads query heads,
        # so the query heads are viewed as [kv_heads, group] instead of copying keys and values.
        group = h // kvh
        q = q.reshape(b, t, kvh, group, hd)
        scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) / math.sqrt(hd)
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(b, t, h * hd)
        # Scale the residual-branch output init down with depth, as GPT-2 does, for stable early steps.
        out_std = std / math.sqrt(2 * c.num_layers)
        return hk.Linear(c.hidden_dim, with_bias=False, w_init=_init(out_std), name="o_proj")(out)


class _SwiGLU(hk.Module):
    def __init__(self, config: LlamaConfig, name: str | None = None):
        super().__init__(name=name)
        self.c = config

    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.c
        gate = hk.Linear(c.intermediate_dim, with_bias=False, w_init=_init(0.02), name="gate_proj")(x)
        up = hk.Linear(c.intermediate_dim, with_bias=False, w_init=_init(0.02), name="up_proj")(x)
        out_std = 0.02 / math.sqrt(2 * c.num_layers)
        return hk.Linear(c.hidden_dim, with_bias=False, w_init=_init(out_std), name="down_proj")(
            jax.nn.silu(gate) * up)


class _Block(hk.Module):
    def __init__(self, config: LlamaConfig, name: str | None = None):
        super().__init__(name=name)
        self.c = config

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + _Attention(self.c, name="attn")(_RMSNorm(self.c.norm_eps, name="attn_norm")(x))
        return x + _SwiGLU(self.c, name="mlp")(_RMSNorm(self.c.norm_eps, name="mlp_norm")(x))


def llama_forward(config: LlamaConfig, tokens: jax.Array, compute_dtype: Any = jnp.float32) -> jax.Array:
    """Logits ``[batch, seq, vocab]`` (float32) for int tokens ``[batch, seq]``; call inside ``hk.transform``.

    Parameters are created in float32; activations run in ``compute_dtype`` (the caller casts the
    parameters for a bfloat16 policy, see ``levanter.trainer``).
    """
    embed = hk.Embed(config.vocab_size, config.hidden_dim, w_init=_init(0.02), name="embed")
    x = embed(tokens).astype(compute_dtype)
    for i in range(config.num_layers):
        x = _Block(config, name=f"layer_{i}")(x)
    x = _RMSNorm(config.norm_eps, name="final_norm")(x)
    if config.tie_embeddings:
        logits = x @ embed.embeddings.astype(x.dtype).T
    else:
        logits = hk.Linear(config.vocab_size, with_bias=False, w_init=_init(0.02), name="lm_head")(x)
    return logits.astype(jnp.float32)


def transformed_llama(config: LlamaConfig, compute_dtype: Any = jnp.float32) -> hk.Transformed:
    """``init(rng, tokens)`` / ``apply(params, None, tokens)`` pair for the model ``config`` describes."""
    return hk.transform(lambda tokens: llama_forward(config, tokens, compute_dtype))
