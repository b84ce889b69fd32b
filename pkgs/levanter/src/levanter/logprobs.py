"""Log-probabilities of whole completions: what preference training and its reference score.

Every sequence log-prob of the project is :func:`sequence_logprobs`, and it gets each target's
log-probability from :func:`token_logprobs` alone: a blockwise computation that never holds the
whole ``[batch, seq, vocab]`` logits replaces that one function.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from levanter.data.chat import ROW_IDS, ROW_SEGMENTS, loss_weights

__all__ = ["sequence_logprobs", "token_logprobs"]


def token_logprobs(model: Any, params: Any, windows: jax.Array, compute_dtype: Any) -> jax.Array:
    """``[b, seq_len]`` float32: log-probability under ``model`` of each next token of chat windows
    ``[b, 3, seq_len + 1]`` (ids, loss mask, segment ids; attention stays inside each segment)."""
    cast = jax.tree.map(lambda p: p.astype(compute_dtype), params)
    tokens, segments = windows[:, ROW_IDS], windows[:, ROW_SEGMENTS]
    logits = model.apply(cast, None, tokens[:, :-1], segment_ids=segments[:, :-1])
    picked = jnp.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def sequence_logprobs(model: Any, params: Any, windows: jax.Array, compute_dtype: Any) -> tuple[jax.Array, jax.Array]:
    """``(sums, counts)``, each ``[b]`` float32: the summed log-probability of the targets the loss
    mask counts in each window (a completion's tokens), and how many there are."""
    weights = loss_weights(windows).astype(jnp.float32)
    return jnp.sum(token_logprobs(model, params, windows, compute_dtype) * weights, axis=-1), jnp.sum(weights, axis=-1)
