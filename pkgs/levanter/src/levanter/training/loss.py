"""The training objective: next-token cross entropy (chat windows weighted by their loss mask), plus z-loss."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from levanter.data.chat import ROW_IDS, ROW_SEGMENTS, loss_weights

__all__ = ["loss_fn", "loss_terms"]


def loss_terms(model: Any, params: Any, batch: jax.Array, compute_dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
    """(mean next-token cross entropy, mean squared log-partition) of ``batch`` under ``model`` (Haiku ``Transformed``).

    ``batch`` is ``[b, seq_len + 1]`` token ids (every target counts), or chat windows
    ``[b, 3, seq_len + 1]`` (ids, loss mask, segment ids; ``levanter.data.chat``): then attention
    stays inside each segment and both means run over the targets whose mask is on and whose
    segment is the input's (never across a conversation boundary, never padding).
    """
    # Master weights stay float32; a bfloat16 policy runs the forward on a cast copy.
    cast = jax.tree.map(lambda p: p.astype(compute_dtype), params)
    if batch.ndim == 3:
        tokens, segments = batch[:, ROW_IDS], batch[:, ROW_SEGMENTS]
        logits = model.apply(cast, None, tokens[:, :-1], segment_ids=segments[:, :-1])
        weights = loss_weights(batch).astype(jnp.float32)
    else:
        tokens, weights = batch, None
        logits = model.apply(cast, None, tokens[:, :-1])  # float32
    targets = tokens[:, 1:]
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    if weights is None:
        return jnp.mean(logz - picked), jnp.mean(jnp.square(logz))
    count = jnp.maximum(jnp.sum(weights), 1.0)
    return jnp.sum((logz - picked) * weights) / count, jnp.sum(jnp.square(logz) * weights) / count


def loss_fn(model: Any, params: Any, batch: jax.Array, compute_dtype: jnp.dtype,
            z_loss_weight: float = 0.0) -> jax.Array:
    """Mean next-token cross entropy of ``batch`` (float32; shapes in :func:`loss_terms`), plus the z-loss
    ``z_loss_weight * mean(logsumexp(logits)^2)`` when the weight is not 0."""
    ce, z = loss_terms(model, params, batch, compute_dtype)
    return ce + z_loss_weight * z if z_loss_weight else ce
