"""The training loss over the output head in three matmuls a tile, as Pallas TPU kernels that stage
the logits through HBM a chunk of rows at a time.

``levanter.ops.pallas_loss``' kernels never write a logit to HBM and pay for it in matmuls: the
forward's log-partition, then both gradients from the logits made again, four matmuls of
``rows x hidden x vocab`` where the materialised loss makes three. A training loss's cotangent is a
scalar, so its gradients can be made in the forward, as the blockwise scan makes them
(``levanter.ops.cross_entropy``), and only scaled on the way back. Here, for each chunk of rows:

* the first kernel walks a row tile's vocabulary tiles: it makes each tile's float32 logits, writes
  them to the chunk's staging buffer in HBM, folds them into an online log-sum-exp, and adds
  ``exp(logits - running max) @ head.T`` to a running sum that is rescaled whenever the row's max
  grows (as flash attention accumulates its output): at the last tile, divided by the exponentials'
  sum, that is ``softmax @ head.T``, the softmax's part of ``d hidden``. Two matmuls a tile.
* the second walks the staged logits a vocabulary tile at a time, makes the logits' gradient
  ``alpha * p - beta * onehot`` and adds ``hidden.T @ gradient`` over the chunk's rows to ``d head``
  (its float32 tile held in vector memory over the rows; the output aliased to the previous chunk's
  sum). One matmul a tile.

A staged logit is 8 bytes of HBM traffic (written once, read once), which the kernels' copies
overlap with their matmuls; the staging buffer holds one chunk (``levanter.ops.blocks.STAGE_LOGITS``), so memory
stays bounded. The target's logit and ``d hidden``'s one-hot part (``-beta * head[:, target]``) are
a gather and a row-wise dot in XLA. The vocabulary need not be a multiple of the tile (the head is
read where it lies; the last tile's columns past the vocabulary are masked), nor the rows (padded
with weight 0). ``interpret=True`` runs the kernels in Pallas' interpreter (a CPU, for tests).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.experimental import pallas as pl

from levanter.ops import blocks
from levanter.ops.pallas_loss import (
    _CONTRACT_FIRST,
    _CONTRACT_LAST,
    Tiles,
    _flat,
    _fused_lm_loss_bwd,
    _fused_lm_loss_fwd,
    _logits_grad,
    _masked_logits,
    _online_lse,
    _pad_rows,
    _params,
    _totals,
    _tpu,
)

__all__ = ["chunk_rows", "staged_grads", "staged_lm_loss"]


def chunk_rows(rows: int, vocab: int, tiles: Tiles) -> int:
    """Rows per chunk: as many row tiles as ``levanter.ops.blocks.STAGE_LOGITS`` holds (at least one),
    at most ``rows`` rounded up to the row tile."""
    width = -(-vocab // tiles.vocab) * tiles.vocab
    most = max(blocks.STAGE_LOGITS // (width * tiles.rows), 1) * tiles.rows
    return min(most, -(-rows // tiles.rows) * tiles.rows)


# --------------------------------------------------------------------------- the logits, staged

def _stage_kernel(h_ref: Any, w_ref: Any, logits_ref: Any, lse_ref: Any, e_ref: Any, m_sc: Any, l_sc: Any, *,
                  tv: int, vocab: int) -> None:
    j, last = pl.program_id(1), pl.num_programs(1) - 1

    @pl.when(j == 0)
    def _init() -> None:
        m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        e_ref[...] = jnp.zeros(e_ref.shape, jnp.float32)

    def tile(ragged: bool) -> None:
        h, w = h_ref[...], w_ref[...]
        if ragged:
            # The last tile overhangs the head: its columns past the vocabulary hold whatever the
            # buffer held (NaN not excluded), masked in the logits and zeroed in the weights (0 * NaN
            # would reach d hidden through the second matmul).
            logits, _ = _masked_logits(h, w, j, tv, vocab)
            w = jnp.where(j * tv + jax.lax.broadcasted_iota(jnp.int32, w.shape, 1) < vocab, w, 0)
        else:
            logits = jnp.dot(h, w, preferred_element_type=jnp.float32)
        logits_ref[...] = logits
        m_old, q = _online_lse(m_sc, l_sc, logits, jnp.max(logits, axis=1, keepdims=True))
        e_ref[...] = e_ref[...] * jnp.exp(m_old - m_sc[...]) + jax.lax.dot_general(
            q.astype(w.dtype), w, _CONTRACT_LAST, preferred_element_type=jnp.float32)

    if vocab % tv:
        # Two bodies: the full tiles pay for no mask.
        pl.when(j < last)(lambda: tile(False))
        pl.when(j == last)(lambda: tile(True))
    else:
        tile(False)

    @pl.when(j == last)
    def _done() -> None:
        lse_ref[...] = m_sc[...] + jnp.log(l_sc[...])
        e_ref[...] = e_ref[...] / l_sc[...]


def _stage(h: jax.Array, head: jax.Array, tiles: Tiles, interpret: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(staged float32 logits ``[rows, vocab tiles x tv]``, log-partitions ``[rows, 1]``, ``softmax @
    head.T`` float32 ``[rows, d]``) of a chunk's ``h`` (rows a multiple of the row tile)."""
    (rows, d), vocab = h.shape, head.shape[1]
    tn, tv = tiles.rows, tiles.vocab
    nj = pl.cdiv(vocab, tv)
    row_tile = pl.BlockSpec((tn, d), lambda i, j: (i, 0))
    return pl.pallas_call(
        functools.partial(_stage_kernel, tv=tv, vocab=vocab),
        grid=(rows // tn, nj),
        in_specs=[row_tile, pl.BlockSpec((d, tv), lambda i, j: (0, j))],
        out_specs=[pl.BlockSpec((tn, tv), lambda i, j: (i, j)), pl.BlockSpec((tn, 1), lambda i, j: (i, 0)),
                   row_tile],
        out_shape=[jax.ShapeDtypeStruct((rows, nj * tv), jnp.float32), jax.ShapeDtypeStruct((rows, 1), jnp.float32),
                   jax.ShapeDtypeStruct((rows, d), jnp.float32)],
        scratch_shapes=[_tpu().VMEM((tn, 1), jnp.float32)] * 2,
        compiler_params=_params(),
        interpret=interpret,
    )(h, head)


# --------------------------------------------------------------------------- d head from the staged logits

def _head_grad_kernel(h_ref: Any, logits_ref: Any, t_ref: Any, lse_ref: Any, a_ref: Any, b_ref: Any, *refs: Any,
                      tv: int, first: bool) -> None:
    dw_ref = refs[-1]
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _init() -> None:
        # The chunks before this one, summed (aliased: read once a vocabulary tile), or nothing.
        dw_ref[...] = jnp.zeros(dw_ref.shape, jnp.float32) if first else refs[0][...]

    logits = logits_ref[...]  # staged columns past the vocabulary are -inf
    cols = j * tv + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    g = _logits_grad(logits, cols, t_ref[...], lse_ref[...], a_ref[...], b_ref[...])
    h = h_ref[...]
    dw_ref[...] += jax.lax.dot_general(h, g.astype(h.dtype), _CONTRACT_FIRST, preferred_element_type=jnp.float32)


def _head_grad(h: jax.Array, logits: jax.Array, vecs: list[jax.Array], dw: jax.Array | None, vocab: int,
               tiles: Tiles, interpret: bool) -> jax.Array:
    """``d head`` float32 ``[d, vocab]``: ``dw`` (None: zeros) plus ``h.T @ (alpha * p - beta * onehot)``
    over a chunk; ``vecs`` its targets, log-partitions, alphas and betas, ``[rows, 1]`` each."""
    rows, d = h.shape
    tn, tv = tiles.rows, tiles.vocab
    row_vec = pl.BlockSpec((tn, 1), lambda j, i: (i, 0))
    dw_spec = pl.BlockSpec((d, tv), lambda j, i: (0, j))
    first = dw is None
    return pl.pallas_call(
        functools.partial(_head_grad_kernel, tv=tv, first=first),
        grid=(logits.shape[1] // tv, rows // tn),
        in_specs=[pl.BlockSpec((tn, d), lambda j, i: (i, 0)), pl.BlockSpec((tn, tv), lambda j, i: (i, j))]
        + [row_vec] * 4 + ([] if first else [dw_spec]),
        out_specs=dw_spec,
        out_shape=jax.ShapeDtypeStruct((d, vocab), jnp.float32),
        input_output_aliases={} if first else {6: 0},
        compiler_params=_params(),
        interpret=interpret,
    )(h, logits, *vecs, *([] if first else [dw]))


# --------------------------------------------------------------------------- the loss and its gradients

def staged_grads(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array, z_weight: float,
                 tiles: Tiles, *, interpret: bool = False) -> tuple[jax.Array, ...]:
    """(log-partitions ``[n]``, target logits ``[n]``, d hidden float32 ``[n, d]``, d head float32
    ``[d, V]``) of ``sum(weights * (lse - picked + z_weight * lse^2))`` over the rows of ``hidden @
    head`` (``hidden`` ``[n, d]``, ``head`` ``[d, V]``, ``targets`` int32 and ``weights`` float32 ``[n]``)."""
    n = hidden.shape[0]
    chunk = chunk_rows(n, head.shape[1], tiles)
    rows = -(-n // tiles.rows) * tiles.rows
    h, t, w = _pad_rows(hidden, rows), _pad_rows(targets, rows), _pad_rows(weights, rows)

    def one_chunk(dw: jax.Array | None, h: jax.Array, t: jax.Array, w: jax.Array) -> Any:
        logits, lse, e = _stage(h, head, tiles, interpret)
        # d/dlogits of w * (lse - picked + z * lse^2) = w * ((1 + 2 z lse) p - onehot)
        vecs = [t.reshape(-1, 1), lse, w.reshape(-1, 1) * (1.0 + 2.0 * z_weight * lse), w.reshape(-1, 1)]
        return _head_grad(h, logits, vecs, dw, head.shape[1], tiles, interpret), (lse[:, 0], e)

    # The whole chunks in a loop, so one staging buffer is live at a time (unrolled, XLA ran every
    # chunk's first kernel before the second kernels: all the chunks' logits at once), then the rest.
    whole = rows // chunk
    dw, (lse, e) = one_chunk(None, h[:chunk], t[:chunk], w[:chunk])
    if whole > 1:
        split = [x[chunk:whole * chunk].reshape(whole - 1, chunk, *x.shape[1:]) for x in (h, t, w)]
        dw, (lse_more, e_more) = jax.lax.scan(lambda dw, x: one_chunk(dw, *x), dw, split)
        lse, e = jnp.concatenate([lse, lse_more.reshape(-1)]), jnp.concatenate([e, e_more.reshape(-1, e.shape[1])])
    if whole * chunk < rows:
        # The last chunk's rows only once d head is summed so far: its staging buffer not beside the loop's.
        rest, dw = jax.lax.optimization_barrier((h[whole * chunk:], dw))
        dw, (lse_rest, e_rest) = one_chunk(dw, rest, t[whole * chunk:], w[whole * chunk:])
        lse, e = jnp.concatenate([lse, lse_rest]), jnp.concatenate([e, e_rest])
    lse, e = lse[:n], e[:n]
    # The targets' columns of the head, as rows: their logits, and d hidden's one-hot part.
    # (In float32: a product of two bfloat16 values is exact there, as on the matrix unit.)
    picked_w = jnp.take(head, targets, axis=1).T.astype(jnp.float32)
    picked = jnp.sum(hidden.astype(jnp.float32) * picked_w, axis=1)
    dh = (weights * (1.0 + 2.0 * z_weight * lse))[:, None] * e - weights[:, None] * picked_w
    return lse, picked, dh, dw


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def staged_lm_loss(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array, z_weight: float,
                   tiles: Tiles, interpret: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(``ce + z_weight * z``, ``ce``, ``z``) as ``levanter.ops.cross_entropy.lm_loss`` defines them,
    the gradient of ``total`` made in the forward (undifferentiated: ``pallas_loss``' forward kernel
    alone; ``ce`` or ``z`` differentiated on their own: the gradient by its backward kernels)."""
    return _fused_lm_loss_fwd(hidden, head, targets, weights, z_weight, tiles, interpret)[0]


def _staged_fwd(hidden: Any, head: Any, targets: Any, weights: Any, z_weight: float, tiles: Tiles,
                interpret: bool) -> Any:
    # With symbolic zeros the differentiable arguments come wrapped (CustomVJPPrimal).
    hidden, head, targets, weights = hidden.value, head.value, targets.value, weights.value
    h, t, w = _flat(hidden, targets, weights)
    lse, picked, dh, dw = staged_grads(h, head, t, w, z_weight, tiles, interpret=interpret)
    totals, count = _totals(lse, picked, w, z_weight)
    return totals, (hidden, head, targets, weights, lse, count, dh, dw)


def _staged_bwd(z_weight: float, tiles: Tiles, interpret: bool, residuals: Any, cotangents: Any) -> Any:
    hidden, head, targets, weights, lse, count, dh, dw = residuals
    g_total, g_ce, g_z = cotangents
    if isinstance(g_ce, SymbolicZero) and isinstance(g_z, SymbolicZero):
        if isinstance(g_total, SymbolicZero):
            return jnp.zeros_like(hidden), jnp.zeros_like(head), None, None
        # The gradients are float32 until scaled: rounded to the inputs' dtypes once.
        scale = g_total.astype(jnp.float32) / count
        return (dh * scale).astype(hidden.dtype).reshape(hidden.shape), (dw * scale).astype(head.dtype), None, None

    def value(g: Any) -> jax.Array:
        return jnp.zeros((), jnp.float32) if isinstance(g, SymbolicZero) else g

    # ce or z differentiated on its own: the general backward, which recomputes the logits.
    return _fused_lm_loss_bwd(z_weight, tiles, interpret, (hidden, head, targets, weights, lse, count),
                              tuple(value(g) for g in cotangents))


staged_lm_loss.defvjp(_staged_fwd, _staged_bwd, symbolic_zeros=True)
