"""The output head's softmax as Pallas TPU kernels: the logits live only in the chip's vector
memory, a ``[rows, vocab]`` tile at a time, and never reach HBM.

The blockwise loss (``levanter.ops.cross_entropy``) hands XLA a block of logits to materialise in
HBM: every elementwise pass over them (the log-partition's max and sum, the probabilities, their
gradient) reads or writes 4 bytes a logit. At hidden 512 that traffic, not the matmuls, sets the
loss's time. Here each tile's logits are made by the matrix unit and consumed in place:

* the forward kernel walks the vocabulary tiles of a row tile with an online log-sum-exp (running
  max and rescaled sum) and the target's logit: ``[rows]`` log-partitions and target logits out;
* the backward recomputes each tile's logits and their gradient ``alpha * p - beta * onehot``
  (``alpha``, ``beta`` per row: the loss's weights, z-loss and cotangents folded in), in two
  kernels: one over row tiles accumulating ``d hidden`` (vocabulary innermost), one over
  vocabulary tiles accumulating ``d head`` (rows innermost), each accumulator a float32 output
  tile held in vector memory, scaled and rounded to the inputs' dtype once.

Five matmuls of ``rows x hidden x vocab`` (four in one pass; the materialised loss makes three) for
no logits traffic; the training loss takes ``levanter.ops.pallas_staged``' three by default. Neither
vocabulary nor rows need fill the tiles (masked; weight 0). ``interpret=True``: Pallas' interpreter.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

__all__ = ["Tiles", "default_tiles", "fused_lm_loss", "fused_token_logprobs", "head_grads", "head_stats"]

_VMEM_LIMIT = 100 * 2**20
"""Vector memory a kernel may use (a v5e core: 128 MiB): 1,024-square tiles at hidden 2,048 need 40 MiB, over the default."""


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Tile sizes of the kernels: ``rows`` of the flattened ``batch x seq`` positions, ``vocab`` columns.

    The fastest measured on the TPU v5e (2026-12-07, ``benchmarks/bench_loss``, staged): 86.9 ms at 32 x
    1024 rows of hidden 512, 75.2 at 16 x 1024 of hidden 1024 (512 x 2,048 tiles: 88.7, 80.2); at hidden
    2,048 half the rows (:func:`default_tiles`): 151.4 ms at 8 x 2048 rows, 181.8 with 1,024 rows.
    """

    rows: int = 1024
    vocab: int = 1024
    one_pass: bool = True
    """The backward's two gradients from one recomputation of the logits, d hidden accumulated
    through HBM (``_one_pass``; with fewer than three row tiles the two-pass kernels run)."""
    staged: bool = True
    """The training loss's gradients in its forward, each tile's logits made once and staged through HBM a
    chunk of rows at a time (``levanter.ops.pallas_staged``: 3 matmuls, not 4; 13-27% faster at the shapes above)."""

    def __post_init__(self) -> None:
        for name in ("one_pass", "staged"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Tiles.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("rows", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value % 128:
                raise ValueError(f"Tiles.{name} must be a positive multiple of 128, got {value!r}")


WIDE_HIDDEN = 1024
"""Above this hidden width :func:`default_tiles` halves the row tile (vector memory: ``d head``'s
float32 tile and ``d hidden``'s grow with the width)."""


def default_tiles(rows: int, hidden: int = 0) -> Tiles:
    """:class:`Tiles`' defaults for ``rows`` positions of hidden states ``hidden`` wide: half the row
    tile above :data:`WIDE_HIDDEN`, and no more than the rows need (in multiples of 128)."""
    tiles = Tiles()
    most = tiles.rows // 2 if hidden > WIDE_HIDDEN else tiles.rows
    return dataclasses.replace(tiles, rows=min(most, -(-rows // 128) * 128))


def _tpu() -> Any:
    """Pallas' TPU module (compiler parameters, memory spaces), imported when a kernel is built: every
    training and evaluation process imports this module (the loss's dispatch), and on a CPU, where the
    kernels run only interpreted in tests, importing it at the top cost each one 0.15 CPU s."""
    from jax.experimental.pallas import tpu

    return tpu


def _params() -> Any:
    """A row or vocabulary tile's outputs are independent (parallel); the inner axis accumulates."""
    return _tpu().CompilerParams(dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=_VMEM_LIMIT)


_CONTRACT_LAST = (((1,), (1,)), ((), ()))
"""``dot_general``'s dimensions for ``a @ b.T`` with ``b`` as it lies (``[m, k] x [n, k] -> [m, n]``)."""
_CONTRACT_FIRST = (((0,), (0,)), ((), ()))
"""``dot_general``'s dimensions for ``a.T @ b`` (``[k, m] x [k, n] -> [m, n]``)."""


def _masked_logits(h: jax.Array, w: jax.Array, j: Any, tv: int, vocab: int,
                   vocab_rows: bool = False) -> tuple[jax.Array, jax.Array]:
    """A tile's float32 logits (columns past the vocabulary at -inf) and their column ids. ``w`` is a
    ``[d, tv]`` tile, or with ``vocab_rows`` a ``[tv, d]`` one (an embedding table's, contracted on
    its second axis as it lies: ``levanter.ops.pallas_head``)."""
    if vocab_rows:
        logits = jax.lax.dot_general(h, w, _CONTRACT_LAST, preferred_element_type=jnp.float32)
    else:
        logits = jnp.dot(h, w, preferred_element_type=jnp.float32)
    cols = j * tv + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    if vocab % tv:
        logits = jnp.where(cols < vocab, logits, -jnp.inf)
    return logits, cols


# --------------------------------------------------------------------------- forward

def _online_lse(m_sc: Any, l_sc: Any, logits: jax.Array, tile_max: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Fold a tile's ``logits`` (their row maxima ``tile_max``) into the running max ``m_sc`` and the
    sum of exponentials ``l_sc`` rescaled to it (an online log-sum-exp); returns the max before and
    the tile's exponentials ``exp(logits - max after)``."""
    m_old = m_sc[...]
    m_new = jnp.maximum(m_old, tile_max)
    q = jnp.exp(logits - m_new)
    l_sc[...] = l_sc[...] * jnp.exp(m_old - m_new) + jnp.sum(q, axis=1, keepdims=True)
    m_sc[...] = m_new
    return m_old, q


def _stats_kernel(h_ref: Any, w_ref: Any, t_ref: Any, lse_ref: Any, picked_ref: Any, m_sc: Any, l_sc: Any,
                  p_sc: Any, *, tv: int, vocab: int) -> None:
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init() -> None:
        m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        p_sc[...] = jnp.zeros(p_sc.shape, jnp.float32)

    logits, cols = _masked_logits(h_ref[...], w_ref[...], j, tv, vocab)
    _online_lse(m_sc, l_sc, logits, jnp.max(logits, axis=1, keepdims=True))
    p_sc[...] += jnp.sum(jnp.where(cols == t_ref[...], logits, 0.0), axis=1, keepdims=True)

    @pl.when(j == pl.num_programs(1) - 1)
    def _done() -> None:
        lse_ref[...] = m_sc[...] + jnp.log(l_sc[...])
        picked_ref[...] = p_sc[...]


def _pad_rows(x: jax.Array, rows: int, fill: Any = 0) -> jax.Array:
    extra = rows - x.shape[0]
    return x if extra == 0 else jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1), constant_values=fill)


def _pad_vocab(head: jax.Array, tv: int) -> jax.Array:
    extra = -head.shape[1] % tv
    return head if extra == 0 else jnp.pad(head, [(0, 0), (0, extra)])


def head_stats(hidden: jax.Array, head: jax.Array, targets: jax.Array, tiles: Tiles, *,
               interpret: bool = False) -> tuple[jax.Array, jax.Array]:
    """(log-partition, target logit) of every row of ``hidden @ head``, float32 ``[n]`` each.

    ``hidden`` is ``[n, d]``, ``head`` ``[d, V]``, ``targets`` ``[n]`` int32."""
    n, d = hidden.shape
    vocab = head.shape[1]
    tn, tv = tiles.rows, tiles.vocab
    rows = -(-n // tn) * tn
    h, t = _pad_rows(hidden, rows), _pad_rows(targets.reshape(n, 1), rows)
    w = _pad_vocab(head, tv)
    grid = (rows // tn, w.shape[1] // tv)
    row_vec = pl.BlockSpec((tn, 1), lambda i, j: (i, 0))
    lse, picked = pl.pallas_call(
        functools.partial(_stats_kernel, tv=tv, vocab=vocab),
        grid=grid,
        in_specs=[pl.BlockSpec((tn, d), lambda i, j: (i, 0)), pl.BlockSpec((d, tv), lambda i, j: (0, j)), row_vec],
        out_specs=[row_vec, row_vec],
        out_shape=[jax.ShapeDtypeStruct((rows, 1), jnp.float32)] * 2,
        scratch_shapes=[_tpu().VMEM((tn, 1), jnp.float32)] * 3,
        compiler_params=_params(),
        interpret=interpret,
    )(h, w, t)
    return lse[:n, 0], picked[:n, 0]


# --------------------------------------------------------------------------- backward

def _d_logits(h: jax.Array, w: jax.Array, j: Any, tv: int, vocab: int, t: jax.Array, lse: jax.Array,
              alpha: jax.Array, beta: jax.Array) -> jax.Array:
    """``alpha * softmax - beta * onehot(target)`` of a tile, in the head's dtype (the matrix unit's)."""
    return _logits_grad(*_masked_logits(h, w, j, tv, vocab), t, lse, alpha, beta).astype(w.dtype)


def _logits_grad(logits: jax.Array, cols: jax.Array, t: jax.Array, lse: jax.Array, alpha: Any, beta: Any) -> jax.Array:
    """Float32 ``alpha * softmax - beta * onehot(target)`` of a tile's logits (columns at -inf: p = 0)."""
    return alpha * jnp.exp(logits - lse) - jnp.where(cols == t, beta, 0.0)


def _dh_kernel(h_ref: Any, w_ref: Any, t_ref: Any, lse_ref: Any, a_ref: Any, b_ref: Any, dh_ref: Any, *, tv: int,
               vocab: int) -> None:
    # The float32 output tile stays in vector memory over the vocabulary (its index does not change):
    # the accumulator.
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init() -> None:
        dh_ref[...] = jnp.zeros(dh_ref.shape, jnp.float32)

    w = w_ref[...]
    g = _d_logits(h_ref[...], w, j, tv, vocab, t_ref[...], lse_ref[...], a_ref[...], b_ref[...])
    # [tn, tv] x [d, tv] contracted over the vocabulary: d hidden, the head used untransposed.
    dh_ref[...] += jax.lax.dot_general(g, w, _CONTRACT_LAST, preferred_element_type=jnp.float32)


def _dw_kernel(h_ref: Any, w_ref: Any, t_ref: Any, lse_ref: Any, a_ref: Any, b_ref: Any, dw_ref: Any, *, tv: int,
               vocab: int) -> None:
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _init() -> None:
        dw_ref[...] = jnp.zeros(dw_ref.shape, jnp.float32)

    h = h_ref[...]
    g = _d_logits(h, w_ref[...], j, tv, vocab, t_ref[...], lse_ref[...], a_ref[...], b_ref[...])
    # [tn, d] x [tn, tv] contracted over the rows: d head.
    dw_ref[...] += jax.lax.dot_general(h, g, _CONTRACT_FIRST, preferred_element_type=jnp.float32)


def head_grads(hidden: jax.Array, head: jax.Array, targets: jax.Array, lse: jax.Array, alpha: jax.Array,
               beta: jax.Array, tiles: Tiles, *, scale: jax.Array | float = 1.0,
               interpret: bool = False) -> tuple[jax.Array, jax.Array]:
    """(d hidden, d head) of ``scale * sum_r (alpha_r * lse_r - beta_r * logit_r[target_r])`` over the
    rows of ``hidden @ head`` (its logits' gradient is ``alpha * p - beta * onehot``), rounded to the
    inputs' dtypes once.

    ``lse`` is :func:`head_stats`' log-partition; ``alpha``, ``beta`` are float32 ``[n]``. ``scale``
    (a float32 scalar) multiplies the float32 sums, not the logits' gradient: that gradient is
    rounded to the head's dtype for the matrix unit, and a one-hot term of -1 + p rounds to half
    the relative error of -(1 - p) / count (bfloat16 spaces values below a power of two finer)."""
    n, d = hidden.shape
    vocab = head.shape[1]
    tn, tv = tiles.rows, tiles.vocab
    rows = -(-n // tn) * tn
    h = _pad_rows(hidden, rows)
    # Padded rows: weight 0 (alpha = beta = 0), so they add nothing to d head.
    vecs = [_pad_rows(x.reshape(n, 1), rows) for x in (targets, lse, alpha.astype(jnp.float32),
                                                       beta.astype(jnp.float32))]
    w = _pad_vocab(head, tv)
    ni, nj = rows // tn, w.shape[1] // tv
    # The one-pass backward reads back the d hidden tile it wrote a vocabulary tile before: safe
    # only when at least three row tiles lie between (the write-back has landed before the read).
    grads = _one_pass if tiles.one_pass and ni >= 3 else _two_pass
    dh, dw = grads(h, w, vecs, ni, nj, tn, tv, vocab, interpret)
    # Scaled and rounded in one elementwise pass XLA fuses (a read of float32, a write of the dtype).
    return (dh[:n] * scale).astype(hidden.dtype), (dw[:, :vocab] * scale).astype(head.dtype)


def _two_pass(h: jax.Array, w: jax.Array, vecs: list, ni: int, nj: int, tn: int, tv: int, vocab: int,
              interpret: bool) -> tuple[jax.Array, jax.Array]:
    """d hidden by row tiles (vocabulary innermost), then d head by vocabulary tiles (rows innermost)."""
    d = h.shape[1]
    kernel_args = dict(tv=tv, vocab=vocab)
    row_vec = pl.BlockSpec((tn, 1), lambda i, j: (i, 0))
    dh = pl.pallas_call(
        functools.partial(_dh_kernel, **kernel_args),
        grid=(ni, nj),
        in_specs=[pl.BlockSpec((tn, d), lambda i, j: (i, 0)), pl.BlockSpec((d, tv), lambda i, j: (0, j))]
        + [row_vec] * 4,
        out_specs=pl.BlockSpec((tn, d), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(h.shape, jnp.float32),
        compiler_params=_params(),
        interpret=interpret,
    )(h, w, *vecs)
    row_vec_t = pl.BlockSpec((tn, 1), lambda j, i: (i, 0))
    dw = pl.pallas_call(
        functools.partial(_dw_kernel, **kernel_args),
        grid=(nj, ni),
        in_specs=[pl.BlockSpec((tn, d), lambda j, i: (i, 0)), pl.BlockSpec((d, tv), lambda j, i: (0, j))]
        + [row_vec_t] * 4,
        out_specs=pl.BlockSpec((d, tv), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct(w.shape, jnp.float32),
        compiler_params=_params(),
        interpret=interpret,
    )(h, w, *vecs)
    return dh, dw


def _one_pass_kernel(h_ref: Any, w_ref: Any, t_ref: Any, lse_ref: Any, a_ref: Any, b_ref: Any, dh_in: Any,
                     dh_ref: Any, dw_ref: Any, *, tv: int, vocab: int, interpret: bool) -> None:
    j, i = pl.program_id(0), pl.program_id(1)
    h, w = h_ref[...], w_ref[...]
    g = _d_logits(h, w, j, tv, vocab, t_ref[...], lse_ref[...], a_ref[...], b_ref[...])
    part = jax.lax.dot_general(g, w, _CONTRACT_LAST, preferred_element_type=jnp.float32)

    @pl.when(j == 0)
    def _first() -> None:
        dh_ref[...] = part

    @pl.when(j > 0)
    def _add() -> None:
        # On the chip dh_in is the output's HBM buffer (aliased), holding the sum over the tiles
        # before j; Pallas' interpreter keeps the input apart and hands each step the output's
        # current block instead. (So the interpreter checks the arithmetic, not the round trip.)
        dh_ref[...] = (dh_ref[...] if interpret else dh_in[...]) + part

    @pl.when(i == 0)
    def _init() -> None:
        dw_ref[...] = jnp.zeros(dw_ref.shape, jnp.float32)

    dw_ref[...] += jax.lax.dot_general(h, g, _CONTRACT_FIRST, preferred_element_type=jnp.float32)


def _one_pass(h: jax.Array, w: jax.Array, vecs: list, ni: int, nj: int, tn: int, tv: int, vocab: int,
              interpret: bool) -> tuple[jax.Array, jax.Array]:
    """Both gradients from one recomputation of each tile's logits (four matmuls in all, not five):
    vocabulary tiles outermost, d head's tile held in vector memory over the rows, d hidden's tiles
    read from and written back to HBM (float32) at every step."""
    d = h.shape[1]
    row_vec = pl.BlockSpec((tn, 1), lambda j, i: (i, 0))
    row_tile = pl.BlockSpec((tn, d), lambda j, i: (i, 0))
    return pl.pallas_call(
        functools.partial(_one_pass_kernel, tv=tv, vocab=vocab, interpret=interpret),
        grid=(nj, ni),
        in_specs=[row_tile, pl.BlockSpec((d, tv), lambda j, i: (0, j))] + [row_vec] * 4 + [row_tile],
        out_specs=[row_tile, pl.BlockSpec((d, tv), lambda j, i: (0, j))],
        out_shape=[jax.ShapeDtypeStruct(h.shape, jnp.float32), jax.ShapeDtypeStruct(w.shape, jnp.float32)],
        input_output_aliases={6: 0},
        # Both axes revisit: d head over the rows, d hidden over the vocabulary (through HBM).
        compiler_params=_tpu().CompilerParams(dimension_semantics=("arbitrary", "arbitrary"),
                                              vmem_limit_bytes=_VMEM_LIMIT),
        interpret=interpret,
    )(h, w, *vecs, jnp.zeros(h.shape, jnp.float32))


# --------------------------------------------------------------------------- differentiable losses

def _flat(hidden: jax.Array, *rows: jax.Array) -> tuple[jax.Array, ...]:
    """``[b, t, d]`` -> ``[b * t, d]`` and each ``[b, t]`` -> ``[b * t]``."""
    return (hidden.reshape(-1, hidden.shape[-1]), *(r.reshape(-1) for r in rows))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def fused_lm_loss(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array, z_weight: float,
                  tiles: Tiles, interpret: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(``ce + z_weight * z``, ``ce``, ``z``) as ``levanter.ops.cross_entropy.lm_loss`` defines them
    (``weights`` float32 ``[b, t]``, ``targets`` int32), by the kernels."""
    return _fused_lm_loss_fwd(hidden, head, targets, weights, z_weight, tiles, interpret)[0]


def _fused_lm_loss_fwd(hidden: jax.Array, head: jax.Array, targets: jax.Array, weights: jax.Array, z_weight: float,
                       tiles: Tiles, interpret: bool) -> Any:
    h, t, w = _flat(hidden, targets, weights)
    lse, picked = head_stats(h, head, t, tiles, interpret=interpret)
    totals, count = _totals(lse, picked, w, z_weight)
    return totals, (hidden, head, targets, weights, lse, count)


def _totals(lse: jax.Array, picked: jax.Array, w: jax.Array, z_weight: float) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """((``ce + z_weight * z``, ``ce``, ``z``), the weights' count) from the rows' log-partitions and target logits."""
    count = jnp.maximum(jnp.sum(w), 1.0)
    ce, z = jnp.sum(w * (lse - picked)) / count, jnp.sum(w * lse * lse) / count
    return (ce + z_weight * z, ce, z), count


def _fused_lm_loss_bwd(z_weight: float, tiles: Tiles, interpret: bool, residuals: Any, cotangents: Any) -> Any:
    hidden, head, targets, weights, lse, count = residuals
    g_total, g_ce, g_z = (g.astype(jnp.float32) for g in cotangents)
    # d/dlogits of a * sum(w * ce) + c * sum(w * lse^2) = w * ((a + 2c lse) p - a onehot)
    a, c = (g_total + g_ce) / count, (g_total * z_weight + g_z) / count
    # a factored out of the logits' gradient (see head_grads); 1 when only z is differentiated.
    scale = jnp.where(a == 0.0, 1.0, a)
    h, t, w = _flat(hidden, targets, weights)
    dh, dw = head_grads(h, head, t, lse, w * (a + 2.0 * c * lse) / scale, w * a / scale, tiles, scale=scale,
                        interpret=interpret)
    return dh.reshape(hidden.shape), dw, None, None


fused_lm_loss.defvjp(_fused_lm_loss_fwd, _fused_lm_loss_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def fused_token_logprobs(hidden: jax.Array, head: jax.Array, targets: jax.Array, tiles: Tiles,
                         interpret: bool) -> jax.Array:
    """``log p(target)`` at every position, ``[b, t]`` float32, by the kernels."""
    return _fused_logprobs_fwd(hidden, head, targets, tiles, interpret)[0]


def _fused_logprobs_fwd(hidden: jax.Array, head: jax.Array, targets: jax.Array, tiles: Tiles, interpret: bool) -> Any:
    h, t = _flat(hidden, targets)
    lse, picked = head_stats(h, head, t, tiles, interpret=interpret)
    return (picked - lse).reshape(targets.shape), (hidden, head, targets, lse)


def _fused_logprobs_bwd(tiles: Tiles, interpret: bool, residuals: Any, g: jax.Array) -> Any:
    hidden, head, targets, lse = residuals
    h, t, gf = _flat(hidden, targets, g.astype(jnp.float32))
    # d/dlogits of g * (picked - lse) = g * onehot - g * p
    dh, dw = head_grads(h, head, t, lse, -gf, -gf, tiles, interpret=interpret)
    return dh.reshape(hidden.shape), dw, None


fused_token_logprobs.defvjp(_fused_logprobs_fwd, _fused_logprobs_bwd)
