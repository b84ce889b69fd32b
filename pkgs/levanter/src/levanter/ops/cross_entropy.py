"""The output head's softmax over the vocabulary, a block of positions at a time: the full
``batch x seq x vocab`` logits never exist.

Each block is ``[batch, block, hidden] @ [hidden, vocab]`` with float32 results (bfloat16 inputs
run on the matrix unit at full rate), so a block's logits, their log-partition and the target's
logit are exact over the whole vocabulary. Three functions share that scan:

* :func:`lm_loss`: the training objective (mean cross entropy and z-loss over weighted targets).
  Its gradient is computed in the forward scan, while each block's logits are at hand, and only
  scaled on the way back: three matmuls per block in all, as with materialised logits, and never
  a recomputation. A caller that differentiates its ``ce`` or ``z`` outputs separately (not only
  ``total``) gets the exact gradient by a second scan.
* :func:`token_logprobs`: ``log p(target)`` at every position, differentiable (DPO's per-sequence
  sums, scoring), with the logits recomputed a block at a time on the way back.
* :func:`token_scores`: ``log p(target)`` and whether the target is the argmax (the evaluation
  harness). Generation picks its tokens in ``levanter.inference``.

``head`` is ``[hidden, vocab]`` (a tied embedding passes its transpose). ``block`` counts
positions of the sequence per step (all rows at once, so a batch split over devices stays split);
None chooses it from the vocabulary and batch (:func:`default_block`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from levanter.ops.blocks import SCOPE, LossImpl, default_block
from levanter.ops.pallas_loss import Tiles, default_tiles, fused_lm_loss, fused_token_logprobs
from levanter.ops.pallas_staged import staged_lm_loss

__all__ = ["PALLAS_WIDEST", "default_block", "lm_loss", "resolve_loss_impl", "token_logprobs", "token_scores"]


PALLAS_WIDEST = 2048
"""The widest hidden state ``AUTO`` gives the Pallas kernels: the widest measured. On the TPU v5e
(2026-12-07, ``benchmarks/bench_loss``) the staged kernels beat the blockwise scan at hidden 512
(86.9 ms against 133.3 at 32 x 1024 rows) and 2,048 (151.4 ms against 188.6 at 8 x 2048 rows)."""


def resolve_loss_impl(impl: LossImpl | str | None, hidden: int | None = None) -> LossImpl:
    """``impl`` with ``AUTO`` resolved: the Pallas kernels on one TPU device (a custom call runs
    whole on one device) for hidden states of width ``hidden`` up to :data:`PALLAS_WIDEST` (None:
    any), the blockwise scan elsewhere."""
    impl = LossImpl.parse(impl)
    if impl is not LossImpl.AUTO:
        return impl
    on_one_tpu = jax.default_backend() == "tpu" and jax.device_count() == 1
    narrow = hidden is None or hidden <= PALLAS_WIDEST
    return LossImpl.PALLAS if on_one_tpu and narrow else LossImpl.BLOCKWISE


def _tiles(hidden: jax.Array, tiles: Tiles | None) -> Tiles:
    return default_tiles(hidden.shape[0] * hidden.shape[1], hidden.shape[2]) if tiles is None else tiles

def _blocks(x: jax.Array, block: int, fill: Any = 0) -> jax.Array:
    """``[b, t, ...]`` -> ``[n, b, block, ...]`` (``t`` padded with ``fill`` to a multiple of ``block``)."""
    b, t = x.shape[:2]
    n = -(-t // block)
    if n * block != t:
        pad = [(0, 0), (0, n * block - t)] + [(0, 0)] * (x.ndim - 2)
        x = jnp.pad(x, pad, constant_values=fill)
    return x.reshape(b, n, block, *x.shape[2:]).swapaxes(0, 1)


def _unblock(x: jax.Array, t: int) -> jax.Array:
    """Inverse of :func:`_blocks`: ``[n, b, block, ...]`` -> ``[b, t, ...]``."""
    n, b, block = x.shape[:3]
    return x.swapaxes(0, 1).reshape(b, n * block, *x.shape[3:])[:, :t]


def _logits(h: jax.Array, head: jax.Array) -> jax.Array:
    """``[b, k, d] @ [d, V]`` in float32 (inputs in their own dtype, accumulation in float32)."""
    return jnp.einsum("bkd,dv->bkv", h, head, preferred_element_type=jnp.float32)


def _block_stats(h: jax.Array, head: jax.Array, tgt: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(logits, log-partition, target logit) of one block, float32."""
    logits = _logits(h, head)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0]
    return logits, lse, picked


def _resolve(hidden: jax.Array, head: jax.Array, block: int | None) -> int:
    b, t, d = hidden.shape
    if head.ndim != 2 or head.shape[0] != d:
        raise ValueError(f"head must be [hidden={d}, vocab], got shape {tuple(head.shape)}")
    size = default_block(b, t, head.shape[1]) if block is None else block
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"block must be a positive int or None, got {block!r}")
    return min(size, t)


# --------------------------------------------------------------------------- the training loss

def _loss_grads(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array, block: int,
                a: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Sums of weighted cross entropy and squared log-partition, and the gradient of
    ``a * sum(w * ce) + c * sum(w * lse^2)`` with respect to ``hidden`` and ``head``."""
    t = hidden.shape[1]
    hb, tb, wb = _blocks(hidden, block), _blocks(targets, block), _blocks(weights, block, 0.0)

    def body(carry: tuple[jax.Array, jax.Array, jax.Array], xs: Any) -> tuple[Any, jax.Array]:
        d_head, ce_sum, z_sum = carry
        h, tgt, w = xs
        logits, lse, picked = _block_stats(h, head, tgt)
        p = jnp.exp(logits - lse[..., None])
        # d/dlogits of a*w*(lse - picked) + c*w*lse^2 = w * ((a + 2c lse) p - a onehot)
        scale = (w * (a + 2.0 * c * lse))[..., None]
        onehot = jax.nn.one_hot(tgt, logits.shape[-1], dtype=jnp.float32)
        d_logits = (scale * p - (w * a)[..., None] * onehot).astype(head.dtype)
        # float32 out: the backward scales it by the cotangent and rounds once (see _lm_loss_fwd).
        d_h = jnp.einsum("bkv,dv->bkd", d_logits, head, preferred_element_type=jnp.float32)
        d_head = d_head + jnp.einsum("bkd,bkv->dv", h, d_logits, preferred_element_type=jnp.float32)
        return (d_head, ce_sum + jnp.sum(w * (lse - picked)), z_sum + jnp.sum(w * lse * lse)), d_h

    zero = jnp.zeros((), jnp.float32)
    init = (jnp.zeros(head.shape, jnp.float32), zero, zero)
    with jax.named_scope(SCOPE):
        (d_head, ce_sum, z_sum), d_h = jax.lax.scan(body, init, (hb, tb, wb))
    return ce_sum, z_sum, _unblock(d_h, t), d_head


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _lm_loss(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array,
             z_weight: float, block: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    count = jnp.maximum(jnp.sum(weights), 1.0)
    one = jnp.ones((), jnp.float32)
    ce_sum, z_sum, _, _ = _loss_grads(hidden, head, targets, weights, block, one, jnp.zeros((), jnp.float32))
    ce, z = ce_sum / count, z_sum / count
    return ce + z_weight * z, ce, z


def _lm_loss_fwd(hidden: Any, head: Any, targets: Any, weights: Any, z_weight: float, block: int) -> Any:
    # With symbolic zeros the differentiable arguments come wrapped (CustomVJPPrimal).
    hidden, head, targets, weights = hidden.value, head.value, targets.value, weights.value
    count = jnp.maximum(jnp.sum(weights), 1.0)
    # The gradient of ``total`` comes out of the same scan as the loss: the block's logits are at hand.
    ce_sum, z_sum, d_h, d_head = _loss_grads(hidden, head, targets, weights, block,
                                             jnp.ones((), jnp.float32), jnp.asarray(z_weight, jnp.float32))
    ce, z = ce_sum / count, z_sum / count
    # Both gradients stay float32 until scaled by the cotangent: rounded to the inputs' dtype once,
    # as the materialised loss's are (rounded here too, a bfloat16 gradient had twice the error).
    residuals = (hidden, head, targets, weights, count, d_h, d_head)
    return (ce + z_weight * z, ce, z), residuals


def _lm_loss_bwd(z_weight: float, block: int, residuals: Any, cotangents: Any) -> Any:
    hidden, head, targets, weights, count, d_h, d_head = residuals
    g_total, g_ce, g_z = cotangents
    if isinstance(g_ce, SymbolicZero) and isinstance(g_z, SymbolicZero):
        if isinstance(g_total, SymbolicZero):
            return jnp.zeros_like(hidden), jnp.zeros_like(head), None, None
        scale = g_total / count
        return (d_h * scale).astype(hidden.dtype), (d_head * scale).astype(head.dtype), None, None

    def value(g: Any) -> jax.Array:
        return jnp.zeros((), jnp.float32) if isinstance(g, SymbolicZero) else g.astype(jnp.float32)

    # ce or z is differentiated on its own: the gradient of a*ce + c*z, by a second scan.
    gt = value(g_total)
    a = (gt + value(g_ce)) / count
    c = (gt * z_weight + value(g_z)) / count
    _, _, d_h, d_head = _loss_grads(hidden, head, targets, weights, block, a, c)
    return d_h.astype(hidden.dtype), d_head.astype(head.dtype), None, None


_lm_loss.defvjp(_lm_loss_fwd, _lm_loss_bwd, symbolic_zeros=True)


def lm_loss(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array | None = None, *,
            z_weight: float = 0.0, block: int | None = None, impl: LossImpl | str | None = LossImpl.AUTO,
            tiles: Tiles | None = None, interpret: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(``ce + z_weight * z``, ``ce``, ``z``) of next-token prediction, float32 scalars.

    ``ce`` is the mean of ``-log p(target)`` and ``z`` the mean of ``logsumexp(logits)^2`` over the
    targets, weighted by ``weights`` ``[b, t]`` (None: every target counts 1; the means divide by
    the weights' sum, at least 1).

    Args:
        hidden: ``[b, t, d]`` final hidden states (the head's inputs).
        head: ``[d, V]`` output projection.
        targets: ``[b, t]`` int token ids.
        weights: ``[b, t]`` per-target weights (chat loss masks), or None.
        z_weight: the z-loss weight inside ``total`` (a Python float).
        block: positions per block of the blockwise scan (None: :func:`default_block`).
        impl: the blockwise scan or the Pallas kernels (:func:`resolve_loss_impl`).
        tiles: the kernels' tiles (None: ``levanter.ops.pallas_loss.default_tiles``).
        interpret: run the kernels in Pallas' interpreter (tests off a TPU).
    """
    size = _resolve(hidden, head, block)
    w = jnp.ones(targets.shape, jnp.float32) if weights is None else weights.astype(jnp.float32)
    if resolve_loss_impl(impl, hidden.shape[-1]) is LossImpl.PALLAS:
        chosen = _tiles(hidden, tiles)
        fused = staged_lm_loss if chosen.staged else fused_lm_loss
        with jax.named_scope(SCOPE):  # the kernels' forward (the staged loss's gradients too) in a profile
            return fused(hidden, head, targets.astype(jnp.int32), w, float(z_weight), chosen, interpret)
    return _lm_loss(hidden, head, targets.astype(jnp.int32), w, float(z_weight), size)


# --------------------------------------------------------------------------- per-token log-probabilities

def _scan_blocks(hidden: jax.Array, head: jax.Array, targets: jax.Array, block: int,
                 per_block: Any) -> Any:
    """``per_block(logits, lse, picked, tgt)`` over the blocks, results back in ``[b, t]`` order."""
    t = hidden.shape[1]

    def body(_: None, xs: Any) -> tuple[None, Any]:
        h, tgt = xs
        logits, lse, picked = _block_stats(h, head, tgt)
        return None, per_block(logits, lse, picked, tgt)

    with jax.named_scope(SCOPE):
        _, out = jax.lax.scan(body, None, (_blocks(hidden, block), _blocks(targets, block)))
    return jax.tree.map(lambda x: _unblock(x, t), out)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _token_logprobs(hidden: jax.Array, head: jax.Array, targets: jax.Array, block: int) -> jax.Array:
    return _scan_blocks(hidden, head, targets, block, lambda _l, lse, picked, _t: picked - lse)


def _token_logprobs_fwd(hidden: Any, head: Any, targets: Any, block: int) -> Any:
    lse, logp = _scan_blocks(hidden, head, targets, block, lambda _l, lse, picked, _t: (lse, picked - lse))
    return logp, (hidden, head, targets, lse)


def _token_logprobs_bwd(block: int, residuals: Any, g: jax.Array) -> Any:
    hidden, head, targets, lse = residuals
    t = hidden.shape[1]
    xs = (_blocks(hidden, block), _blocks(targets, block), _blocks(lse, block), _blocks(g.astype(jnp.float32), block))

    def body(d_head: jax.Array, x: Any) -> tuple[jax.Array, jax.Array]:
        h, tgt, lse_b, g_b = x
        logits = _logits(h, head)
        p = jnp.exp(logits - lse_b[..., None])
        # d log p(target) / d logits = onehot - p
        onehot = jax.nn.one_hot(tgt, logits.shape[-1], dtype=jnp.float32)
        d_logits = (g_b[..., None] * (onehot - p)).astype(head.dtype)
        d_h = jnp.einsum("bkv,dv->bkd", d_logits, head, preferred_element_type=jnp.float32).astype(h.dtype)
        return d_head + jnp.einsum("bkd,bkv->dv", h, d_logits, preferred_element_type=jnp.float32), d_h

    with jax.named_scope(SCOPE):
        d_head, d_h = jax.lax.scan(body, jnp.zeros(head.shape, jnp.float32), xs)
    return _unblock(d_h, t), d_head.astype(head.dtype), None


_token_logprobs.defvjp(_token_logprobs_fwd, _token_logprobs_bwd)


def token_logprobs(hidden: jax.Array, head: jax.Array, targets: jax.Array, *, block: int | None = None,
                   impl: LossImpl | str | None = LossImpl.AUTO, tiles: Tiles | None = None,
                   interpret: bool = False) -> jax.Array:
    """``log p(targets[b, i])`` under ``softmax(hidden[b, i] @ head)``, ``[b, t]`` float32, differentiable.

    The backward pass recomputes each block's logits (one more matmul per block), holding only the
    ``[b, t]`` log-partitions between the passes. ``impl``, ``tiles``, ``interpret``: as :func:`lm_loss`'s.
    """
    size = _resolve(hidden, head, block)
    if resolve_loss_impl(impl, hidden.shape[-1]) is LossImpl.PALLAS:
        with jax.named_scope(SCOPE):
            return fused_token_logprobs(hidden, head, targets.astype(jnp.int32), _tiles(hidden, tiles), interpret)
    return _token_logprobs(hidden, head, targets.astype(jnp.int32), size)


def token_scores(hidden: jax.Array, head: jax.Array, targets: jax.Array, *,
                 block: int | None = None) -> tuple[jax.Array, jax.Array]:
    """(``log p(target)`` float32, whether the target is the argmax) at every position, ``[b, t]`` each."""
    def per_block(logits: jax.Array, lse: jax.Array, picked: jax.Array, tgt: jax.Array) -> Any:
        return picked - lse, jnp.argmax(logits, axis=-1) == tgt

    return _scan_blocks(hidden, head, targets.astype(jnp.int32), _resolve(hidden, head, block), per_block)
