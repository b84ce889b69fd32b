"""The training objective: next-token cross entropy (chat windows weighted by their loss mask), plus
z-loss; and the per-token log-probabilities other objectives (DPO) and scoring are built from.

The output softmax runs a block of positions at a time (``levanter.ops.cross_entropy``): the
``batch x seq x vocab`` logits are never held whole. ``block`` (positions per block, None: chosen
from the vocabulary and batch) and the model's ``impl.loss`` (the blockwise scan or the Pallas
kernels, ``levanter.ops.pallas_loss``) change how, not what, is computed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from levanter.data.chat import ROW_IDS, ROW_SEGMENTS, loss_weights
from levanter.ops.cross_entropy import lm_loss
from levanter.ops.cross_entropy import token_logprobs as _token_logprobs

__all__ = ["loss_fn", "loss_terms", "objective_terms", "sequence_logprobs", "target_weight", "token_logprobs"]


def _cast(model: Any, params: Any, compute_dtype: Any) -> Any:
    """``params`` as the model reads them: a model built for ``compute_dtype`` casts each weight where
    it reads it (one layer at a time); another gets a cast copy."""
    if jnp.dtype(getattr(model, "compute_dtype", jnp.float32)) == jnp.dtype(compute_dtype):
        return params
    return jax.tree.map(lambda p: p.astype(compute_dtype), params)


def _how(model: Any) -> dict[str, Any]:
    """The loss implementation the model was built with (``Impl.loss``; a model without one: auto)."""
    impl = getattr(model, "impl", None)
    return {} if impl is None else {"impl": impl.loss, "interpret": impl.interpret}


def _inputs(batch: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None, jax.Array | None]:
    """(inputs, targets, segment ids, weights) of ``[b, seq_len + 1]`` ids or ``[b, 3, seq_len + 1]`` chat windows."""
    if batch.ndim == 3:
        tokens, segments = batch[:, ROW_IDS], batch[:, ROW_SEGMENTS]
        return tokens[:, :-1], tokens[:, 1:], segments[:, :-1], loss_weights(batch).astype(jnp.float32)
    return batch[:, :-1], batch[:, 1:], None, None


def target_weight(batch: jax.Array) -> jax.Array:
    """The weight the means of :func:`objective_terms` divide by (before its floor of 1), float32: the
    number of targets of ``[b, seq_len + 1]`` ids, the sum of the loss weights of chat windows."""
    _, targets, _, weights = _inputs(batch)
    return jnp.asarray(targets.size, jnp.float32) if weights is None else jnp.sum(weights)


def objective_terms(model: Any, params: Any, batch: jax.Array, compute_dtype: Any, z_loss_weight: float = 0.0, *,
                    block: int | None = None, weights: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(``ce + z_loss_weight * z``, ``ce``, ``z``) of ``batch`` (shapes in :func:`loss_terms`).

    Differentiate the first: its gradient is computed with the loss, in one pass over the blocks.
    ``weights`` (``[b, seq_len]``), when given, replace the batch's own (rows that only pad a batch
    to its shape count 0).
    """
    inputs, targets, segments, own = _inputs(batch)
    cast = _cast(model, params, compute_dtype)
    hidden = model.hidden(cast, inputs, segment_ids=segments)
    return lm_loss(hidden, model.head(cast), targets, own if weights is None else weights, z_weight=z_loss_weight,
                   block=block, **_how(model))


def loss_terms(model: Any, params: Any, batch: jax.Array, compute_dtype: jnp.dtype, *,
               block: int | None = None) -> tuple[jax.Array, jax.Array]:
    """(mean next-token cross entropy, mean squared log-partition) of ``batch`` under ``model``
    (a model config's ``build()``: ``hidden`` and ``head``).

    ``batch`` is ``[b, seq_len + 1]`` token ids (every target counts), or chat windows
    ``[b, 3, seq_len + 1]`` (ids, loss mask, segment ids; ``levanter.data.chat``): then attention
    stays inside each segment and both means run over the targets whose mask is on and whose
    segment is the input's (never across a conversation boundary, never padding).
    """
    _, ce, z = objective_terms(model, params, batch, compute_dtype, block=block)
    return ce, z


def loss_fn(model: Any, params: Any, batch: jax.Array, compute_dtype: jnp.dtype,
            z_loss_weight: float = 0.0, *, block: int | None = None, weights: jax.Array | None = None) -> jax.Array:
    """Mean next-token cross entropy of ``batch`` (float32; shapes in :func:`loss_terms`), plus the z-loss
    ``z_loss_weight * mean(logsumexp(logits)^2)`` when the weight is not 0; ``weights`` as in
    :func:`objective_terms`."""
    return objective_terms(model, params, batch, compute_dtype, z_loss_weight, block=block, weights=weights)[0]


def token_logprobs(model: Any, params: Any, tokens: jax.Array, targets: jax.Array, compute_dtype: Any = jnp.float32,
                   *, segment_ids: jax.Array | None = None, block: int | None = None) -> jax.Array:
    """``log p(targets[b, i] | tokens[b, :i + 1])``, ``[b, t]`` float32, differentiable with respect to ``params``.

    ``tokens`` and ``targets`` are ``[b, t]`` ids (the targets usually the tokens shifted left by one);
    with ``segment_ids`` ``[b, t]`` attention stays inside each packed segment. The logits are made
    and dropped a block of positions at a time, forward and backward.
    """
    cast = _cast(model, params, compute_dtype)
    hidden = model.hidden(cast, tokens, segment_ids=segment_ids)
    return _token_logprobs(hidden, model.head(cast), targets, block=block, **_how(model))


def sequence_logprobs(model: Any, params: Any, batch: jax.Array, compute_dtype: Any = jnp.float32, *,
                      block: int | None = None) -> jax.Array:
    """Per row of ``batch``, the sum of ``log p(target)`` over the targets the trainer's loss counts,
    ``[b]`` float32, differentiable: every target of ``[b, seq_len + 1]`` ids; of ``[b, 3, seq_len + 1]``
    chat windows those whose loss mask is on, inside their own conversation (DPO's ``log pi(y | x)``)."""
    inputs, targets, segments, weights = _inputs(batch)
    logp = token_logprobs(model, params, inputs, targets, compute_dtype, segment_ids=segments, block=block)
    return jnp.sum(logp if weights is None else logp * weights, axis=-1)
