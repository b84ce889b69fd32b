"""Causal grouped-query attention, two ways: XLA's einsums (any device) and JAX's Pallas splash
attention kernel (TPU; on a CPU in Pallas' interpret mode, for tests).

Both take ``q [b, t, kv_heads, group, d]`` (query head ``h`` is ``kv * group + g``), ``k, v
[b, t, kv_heads, d]`` and optional ``segment_ids [b, t]`` (packed documents: a token sees only
earlier tokens of its own segment), and return ``[b, t, kv_heads * group * d]``. They compute the
same function; which one runs is a choice of speed and memory (not part of a run's identity).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from levanter.ops.splash_tiles import LANES, SplashBlocks, splash_blocks

SAVED = "attention"
"""The ``checkpoint_name`` of what the backward pass of attention reads besides its inputs: the splash
kernel's output and log-sum-exp as the kernel lays them out, or the XLA path's output. A remat policy
saving this name keeps the splash forward kernel from running again in the backward pass (saving the
output after its transpose would not: the kernel's backward reads its own residuals)."""

__all__ = ["LIVE_BUCKET", "SAVED", "cached_attention", "live_buckets", "splash_attention", "splash_supports", "xla_attention"]


def xla_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
    """Attention as einsums: the ``[b, heads, t, t]`` scores are materialised (float32 softmax)."""
    t = q.shape[1]
    allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None, None]
    if segment_ids is not None:
        # Block-diagonal: a token sees only earlier tokens of its own segment.
        same = segment_ids[:, :, None] == segment_ids[:, None, :]  # [b, q, s]
        allowed = allowed & same[:, None, None]
    return checkpoint_name(_masked_attention(q, k, v, allowed), SAVED)


LIVE_BUCKET = 128
"""The smallest prefix of the cache a live read cuts (``levanter.models``' decoder); each larger is
twice the one before, up to the whole cache."""


def live_buckets(length: int, smallest: int = LIVE_BUCKET) -> list[int]:
    """The prefixes of a ``length``-position cache a live read may cut: ``smallest``, twice that, ...,
    then ``length`` itself."""
    sizes = []
    size = smallest
    while size < length:
        sizes.append(size)
        size *= 2
    return [*sizes, length]


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
                     positions: jax.Array) -> jax.Array:
    """Attention of new tokens over a key/value cache and themselves (``levanter.inference``).

    ``q [b, t, kv_heads, group, d]``, ``k, v [b, t, kv_heads, d]`` are the new tokens', at
    ``positions [b, t]`` (each row a run of consecutive positions); the caches ``[b, s, kv_heads *
    d]`` hold each row's earlier keys and values by position, the heads side by side on the last
    axis (as ``levanter.models`` keeps them: dense on a TPU when a head is narrower than its 128
    lanes, which a ``[..., kv_heads, d]`` cache pads). A new token sees the cache's positions
    before the row's run (never what the cache holds from there on) and the run's tokens up to
    itself. The cache is read as it is (never joined to the new keys, never reshaped), so a decode
    step reads it once; the caller cuts it to the live prefix (:func:`live_buckets`).

    The queries are spread block-diagonally over the heads (``[kv_heads * d, kv_heads * group]``,
    zero off a query's own head) so that one matmul scores every head, and the values' matmul
    gives every head's weights against every head's values, of which each head keeps its own (on a
    TPU a reshape that splits the lanes would copy the cache). The zeros cost ``kv_heads`` times
    the minimal arithmetic, far below what reading the cache costs.
    """
    b, t, kvh, group, hd = q.shape
    s = k_cache.shape[1]
    eye = jnp.eye(kvh, dtype=q.dtype)
    spread = jnp.einsum("bqkgd,jk->bqjdkg", q, eye).reshape(b, t, kvh * hd, kvh * group)
    scale = 1.0 / math.sqrt(hd)
    past = jnp.arange(s)[None, :] < positions[:, :1]  # [b, s]
    old = jnp.einsum("bqij,bsi->bqjs", spread, k_cache.astype(q.dtype)).astype(jnp.float32) * scale
    old = old.reshape(b, t, kvh, group, s).transpose(0, 2, 3, 1, 4)  # [b, kv, g, q, s]
    new = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) * scale
    floor = jnp.finfo(jnp.float32).min
    old = jnp.where(past[:, None, None, None, :], old, floor)
    new = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), new, floor)
    probs = jax.nn.softmax(jnp.concatenate([old, new], axis=-1), axis=-1).astype(v_cache.dtype)
    weights = probs[..., :s].transpose(0, 3, 1, 2, 4).reshape(b, t, kvh * group, s)
    every = jnp.einsum("bqjs,bsi->bqji", weights, v_cache).reshape(b, t, kvh, group, kvh, hd)
    out = (jnp.einsum("bqkgjd,kj->bqkgd", every, eye.astype(every.dtype))
           + jnp.einsum("bkgqs,bskd->bqkgd", probs[..., s:], v.astype(v_cache.dtype)))
    return out.astype(v.dtype).reshape(b, t, kvh * group * hd)


def _masked_attention(q: jax.Array, k: jax.Array, v: jax.Array, allowed: jax.Array) -> jax.Array:
    """Softmax attention (float32 scores) where ``allowed`` (broadcast to ``[b, kv, g, t, s]``) holds."""
    b, t, kvh, group, hd = q.shape
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) / math.sqrt(hd)
    scores = jnp.where(allowed, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(b, t, kvh * group * hd)


def splash_supports(seq_len: int) -> bool:
    """Whether the splash kernel takes sequences of ``seq_len`` (a multiple of its 128-wide blocks)."""
    return seq_len % LANES == 0


@functools.lru_cache(maxsize=32)
def _kernel(num_heads: int, seq_len: int, blocks: SplashBlocks, interpret: bool) -> Any:
    """The splash kernel of one causal ``[heads, t, d]`` problem (built once per shape: its mask
    tables are made on the host).

    Built eagerly even when first asked for inside a trace: the kernel keeps its mask tables as
    arrays, and a table made as a tracer of the first program traced would leak into every later
    one (JAX's ``UnexpectedTracerError`` as soon as a second program, an evaluation after the
    training step, uses the cached kernel)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mask = sm.MultiHeadMask([sm.CausalMask((seq_len, seq_len)) for _ in range(num_heads)])
    with jax.ensure_compile_time_eval():
        return sk.make_splash_mha_single_device(mask, block_sizes=blocks.block_sizes(), interpret=interpret,
                                                residual_checkpoint_name=SAVED)


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None, *,
                     blocks: SplashBlocks | None = None, interpret: bool = False, mesh: Any = None,
                     batch_axes: Sequence[str] = (), head_axis: str | None = None) -> jax.Array:
    """Attention by the splash kernel (flash attention over blocks; masked-out blocks skipped).

    Args:
        blocks: the kernels' tiles (cut to the sequence: :meth:`SplashBlocks.for_seq`); by default
            those measured for this chip and problem (:func:`levanter.ops.splash_tiles.splash_blocks`,
            the chip read from ``mesh``'s devices, else JAX's first device).
        interpret: run the kernel in Pallas' interpreter (any backend, slow: for tests).
        mesh: a device mesh whose ``batch_axes`` split the rows (and ``head_axis`` the key/value
            heads, when it divides them): the kernel then runs per shard (``shard_map``), as a
            custom call cannot be split by XLA.
    """
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    b, t, kvh, group, hd = q.shape
    chosen = splash_blocks(hd, t, _device_kind(mesh)) if blocks is None else blocks.for_seq(t)
    kernel = _kernel(kvh * group, t, chosen, interpret)
    # [b, t, kv, g, d] -> [b, kv * g, t, d]; the kernel does not scale the scores.
    qh = (q * (1.0 / math.sqrt(hd))).astype(q.dtype).reshape(b, t, kvh * group, hd).transpose(0, 2, 1, 3)
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

    def per_shard(qs: jax.Array, ks: jax.Array, vs: jax.Array, seg: jax.Array | None) -> jax.Array:
        local = kernel if qs.shape[1] == kvh * group else _kernel(qs.shape[1], t, chosen, interpret)
        if seg is None:
            return jax.vmap(lambda a, c, d: local(a, c, d))(qs, ks, vs)
        return jax.vmap(lambda a, c, d, s: local(a, c, d, segment_ids=sk.SegmentIds(q=s, kv=s)))(qs, ks, vs, seg)

    if mesh is None:
        out = per_shard(qh, kh, vh, segment_ids)
    else:
        out = _sharded(per_shard, mesh, tuple(batch_axes), head_axis, kvh, qh, kh, vh, segment_ids)
    return out.transpose(0, 2, 1, 3).reshape(b, t, kvh * group * hd).astype(q.dtype)


def _device_kind(mesh: Any) -> str:
    """The chip the kernel is compiled for: the mesh's (a described TPU when compiling ahead of time
    on a host without one), else JAX's first device."""
    device = mesh.devices.flat[0] if mesh is not None else jax.devices()[0]
    return str(device.device_kind)


def _sharded(fn: Any, mesh: Any, batch_axes: tuple[str, ...], head_axis: str | None, kv_heads: int,
             q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """``fn`` per shard of the rows (and of the key/value heads when ``head_axis`` divides them)."""
    from jax.sharding import PartitionSpec as P

    rows = batch_axes if q.shape[0] % math.prod(mesh.shape[a] for a in batch_axes) == 0 else None
    heads = head_axis if head_axis is not None and kv_heads % mesh.shape[head_axis] == 0 else None
    spec = P(rows, heads, None, None)
    if segment_ids is None:
        return jax.shard_map(lambda a, c, d: fn(a, c, d, None), mesh=mesh, in_specs=(spec, spec, spec),
                             out_specs=spec, check_vma=False)(q, k, v)
    return jax.shard_map(fn, mesh=mesh, in_specs=(spec, spec, spec, P(rows, None)), out_specs=spec,
                         check_vma=False)(q, k, v, segment_ids)
