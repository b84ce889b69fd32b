"""The Haiku modules of the Llama decoder (imported only when a model is built)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from levanter.models.impl import Attention, Decode, Impl, Remat
from levanter.models.layout import LAYERS, stack_layers
from levanter.models.llama import LlamaConfig
from levanter.models.vocab import stored_head
from levanter.ops.attention import SAVED, cached_attention, live_buckets, xla_attention
from levanter.ops.kv_cache import write_rows
from levanter.ops.rotary import rotary

__all__ = ["KVCache", "LlamaModel", "llama_cached", "llama_forward", "llama_hidden", "remat_policy", "resolve_attention",
           "resolve_decode", "transformed_llama"]


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


class _Attention(hk.Module):
    def __init__(self, config: LlamaConfig, shard: Shard, impl: Impl, name: str | None = None):
        super().__init__(name=name)
        self.c = config
        self.shard = shard
        self.impl = impl

    def __call__(self, x: jax.Array, segment_ids: jax.Array | None, positions: jax.Array,
                 cache: KVCache | None = None) -> Any:
        """The block's attention output; with ``cache`` (one layer's, for decoding: read, never
        written here) the output over the cache and the new tokens at ``positions`` (``[b, t]``,
        each row's run of consecutive positions), and the new tokens' keys and values."""
        c = self.c
        b, t, _ = x.shape
        hd, h, kvh = c.head_dim, c.num_heads, c.num_kv_heads
        std = 0.02
        q = hk.Linear(h * hd, with_bias=False, w_init=_init(std), name="q_proj")(x)
        k = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="k_proj")(x)
        v = hk.Linear(kvh * hd, with_bias=False, w_init=_init(std), name="v_proj")(x)
        q = self.shard(_named(q, "q_proj").reshape(b, t, h, hd), ("batch", None, "heads", None))
        k = self.shard(_named(k, "k_proj").reshape(b, t, kvh, hd), ("batch", None, "kv_heads", None))
        v = self.shard(_named(v, "v_proj").reshape(b, t, kvh, hd), ("batch", None, "kv_heads", None))
        q = rotary(q, positions, c.rope_theta)
        k = rotary(k, positions, c.rope_theta)
        # Grouped-query attention: each key/value head serves num_heads / num_kv_heads query heads,
        # so the query heads are viewed as [kv_heads, group] instead of copying keys and values.
        q = q.reshape(b, t, kvh, h // kvh, hd)
        if cache is None:
            # Each kernel names what its backward reads (levanter.ops.attention.SAVED) for the remat policies.
            out = _attend(self.impl, self.shard, q, k, v, segment_ids)
        else:
            out = cached_attention(q, k, v, cache.k, cache.v, positions)
            cache = KVCache(k.reshape(b, t, kvh * hd), v.reshape(b, t, kvh * hd))
        # Scale the residual-branch output init down with depth, as GPT-2 does, for stable early steps.
        out_std = std / math.sqrt(2 * c.num_layers)
        out = hk.Linear(c.hidden_dim, with_bias=False, w_init=_init(out_std), name="o_proj")(out)
        return out if cache is None else (out, cache)


class KVCache(NamedTuple):
    """The keys and values of a decoder's tokens, by row and position: ``[b, s, kv_heads * d]`` each
    (one layer's), or ``[layers, b, s, kv_heads * d]`` (the stack's). The heads share the last axis:
    a TPU pads a last axis to 128 lanes, and a head is often 64 wide (a cache ``[..., kv_heads, 64]``
    took twice its bytes, and a step read them all)."""

    k: jax.Array
    v: jax.Array

    def write(self, k: jax.Array, v: jax.Array, positions: jax.Array, impl: Impl = Impl()) -> KVCache:
        """The stack's cache with ``k, v [layers, b, t, kv_heads * d]`` written from each row's first
        position (by the Pallas kernel where ``impl.decode`` resolves to ``PALLAS``)."""
        kernel = resolve_decode(impl.decode) is Decode.PALLAS
        # Off a TPU the kernel can only be interpreted (Mosaic compiles for a TPU alone).
        interpret = impl.interpret or jax.default_backend() != "tpu"
        starts = positions[:, 0]
        return KVCache(write_rows(self.k, k, starts, kernel=kernel, interpret=interpret),
                       write_rows(self.v, v, starts, kernel=kernel, interpret=interpret))


def _attend(impl: Impl, shard: Shard, q: jax.Array, k: jax.Array, v: jax.Array,
            segment_ids: jax.Array | None) -> jax.Array:
    """The attention kernel ``impl`` names (``AUTO`` is resolved by :func:`resolve_attention`)."""
    if resolve_attention(impl.attention, q.shape[1]) is Attention.SPLASH:
        from levanter.ops.attention import splash_attention

        mesh = getattr(shard, "mesh", None)
        return splash_attention(q, k, v, segment_ids, interpret=impl.interpret, mesh=mesh,
                                batch_axes=getattr(shard, "batch_axes", ()), head_axis=getattr(shard, "head_axis", None))
    return xla_attention(q, k, v, segment_ids)


def resolve_attention(choice: Attention, seq_len: int) -> Attention:
    """The kernel ``choice`` means for sequences of ``seq_len`` on this process's default backend:
    ``AUTO`` is splash on a TPU when the kernel takes the length, else XLA."""
    if choice is not Attention.AUTO:
        return choice
    from levanter.ops.attention import splash_supports

    return Attention.SPLASH if jax.default_backend() == "tpu" and splash_supports(seq_len) else Attention.XLA


def resolve_decode(choice: Decode) -> Decode:
    """The cache reads and writes ``choice`` means on this process's default backend: ``AUTO`` is
    ``PALLAS`` on a TPU, else ``LIVE``."""
    if choice is not Decode.AUTO:
        return choice
    return Decode.PALLAS if jax.default_backend() == "tpu" else Decode.LIVE


def _named(x: jax.Array, name: str) -> jax.Array:
    """``x`` tagged for the remat policies (``checkpoint_name``)."""
    return checkpoint_name(x, name)


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


def _layer(config: LlamaConfig, shard: Shard, impl: Impl, x: jax.Array, segment_ids: jax.Array | None,
           positions: jax.Array, cache: KVCache | None = None) -> Any:
    """One transformer block; its modules are made in the caller's name scope (``layer_<i>`` or the stack).
    With ``cache`` (decoding), the block's output and its layer's updated cache."""
    attn_in = _RMSNorm(config.norm_eps, name="attn_norm")(x)
    attended = _Attention(config, shard, impl, name="attn")(attn_in, segment_ids, positions, cache)
    if cache is not None:
        attended, cache = attended
    x = shard(x + attended, ("batch", None, None))
    x = x + _SwiGLU(config, shard, name="mlp")(_RMSNorm(config.norm_eps, name="mlp_norm")(x))
    x = shard(x, ("batch", None, None))
    return x if cache is None else (x, cache)


_SAVED_NAMES = {Remat.SAVE_ATTENTION: ("q_proj", "k_proj", "v_proj", SAVED)}
# The attention projections rather than the MLP's gate and up: per token they are about half the
# bytes (2 hidden + 2 kv against 2 intermediate), which the host link must carry out in the forward
# pass and back in the backward while the layers compute; the MLP's would outrun it (docs/training.md).
# Not o_proj's output: made again from the attention output, it cost less than its bytes (v5e,
# 2026-12-07: llama_600m 16 x 1024 552.6 ms a step without it, 562.5 with; the splash kernel's output
# is kept as it lays it out, a head of 64 padded to 128 lanes, twice the hidden size).
_OFFLOADED_NAMES = {Remat.OFFLOAD: _SAVED_NAMES[Remat.SAVE_ATTENTION]}
_OFFLOAD_MEMORY = "pinned_host"  # where Remat.OFFLOAD puts them (a JAX memory kind)


def remat_policy(remat: Remat) -> Callable[..., Any] | None:
    """The ``jax.checkpoint`` policy of ``remat`` (None: everything recomputed).

    ``OFFLOAD``'s is the same on every backend: the traced step moves its names to host memory
    (``device_put`` to the host's memory space). A TPU's compiled program does the copies; the CPU
    backend lowers them to nothing (its device memory is the host's), so on a CPU it computes
    exactly what ``SAVE_ATTENTION`` does.
    """
    if remat is Remat.SAVE_DOTS:
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    if remat in _SAVED_NAMES:
        return jax.checkpoint_policies.save_only_these_names(*_SAVED_NAMES[remat])
    if remat in _OFFLOADED_NAMES:
        return jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=(), names_which_can_be_offloaded=_OFFLOADED_NAMES[remat],
            offload_src="device", offload_dst=_OFFLOAD_MEMORY)
    return None


def _layers(config: LlamaConfig, shard: Shard, impl: Impl, x: jax.Array, segment_ids: jax.Array | None,
            positions: jax.Array) -> jax.Array:
    """Every block, scanned over stacked weights or unrolled (``impl.scan_layers``), with ``impl.remat``."""
    def block(h: jax.Array) -> jax.Array:
        return _layer(config, shard, impl, h, segment_ids, positions)

    if impl.remat is not Remat.NONE:
        block = hk.remat(block, policy=remat_policy(impl.remat))
    if impl.scan_layers:
        stacked: Any = hk.layer_stack(config.num_layers, unroll=min(impl.unroll, config.num_layers), name=LAYERS)(block)
        return stacked(x)
    for i in range(config.num_layers):
        with hk.name_scope(f"layer_{i}"):
            x = block(x)
    return x


def _cast_getter(dtype: Any) -> Callable[..., Any]:
    """A Haiku getter casting floating parameters to ``dtype`` where they are read: inside the layer
    scan that is one layer's weights at a time, never a copy of the whole model."""
    def getter(next_getter: Callable[[jax.Array], jax.Array], value: jax.Array, context: Any) -> jax.Array:
        value = next_getter(value)
        return value.astype(dtype) if jnp.issubdtype(value.dtype, jnp.floating) else value

    return getter


def llama_hidden(config: LlamaConfig, tokens: jax.Array, compute_dtype: Any = jnp.float32, shard: Shard | None = None,
                 segment_ids: jax.Array | None = None, impl: Impl = Impl()) -> jax.Array:
    """The final (normalised) hidden states ``[batch, seq, hidden]`` in ``compute_dtype``; inside ``hk.transform``.

    With ``segment_ids`` ``[batch, seq]`` (packed conversations), attention stays inside a segment
    and rotary positions restart at each segment's first token. Parameters are float32 and are cast
    to ``compute_dtype`` where each is read.
    """
    return _trunk(config, tokens, compute_dtype, shard or _no_shard, segment_ids, impl)[0]


def _trunk(config: LlamaConfig, tokens: jax.Array, compute_dtype: Any, shard: Shard, segment_ids: jax.Array | None,
           impl: Impl) -> tuple[jax.Array, jax.Array]:
    """(final hidden states, the embedding table in ``compute_dtype``)."""
    with hk.custom_getter(_cast_getter(compute_dtype)):
        embed = hk.Embed(config.vocab_size, config.hidden_dim, w_init=_init(0.02), name="embed")
        x = shard(embed(tokens).astype(compute_dtype), ("batch", None, None))
        positions = jnp.arange(tokens.shape[1]) if segment_ids is None else _segment_positions(segment_ids)
        x = _layers(config, shard, impl, x, segment_ids, positions)
        return _RMSNorm(config.norm_eps, name="final_norm")(x), embed.embeddings


def llama_cached(config: LlamaConfig, tokens: jax.Array, positions: jax.Array, cache: KVCache,
                 compute_dtype: Any = jnp.float32, impl: Impl = Impl()) -> tuple[jax.Array, KVCache]:
    """Final hidden states ``[b, t, hidden]`` of ``tokens [b, t]`` at ``positions [b, t]`` (each row
    consecutive), attending to the stack's ``cache`` (``[layers, b, s, kv_heads * d]``), and the
    cache with the tokens' keys and values written; inside ``hk.transform``. The same modules and
    parameters as :func:`llama_hidden`. The layers only read the cache; it is written once, after
    them, so a step never copies it. ``impl.decode`` says how the cache is read and written (and
    ``impl.interpret`` runs its kernel in Pallas' interpreter); nothing else of ``impl`` is used.

    Unless ``impl.decode`` is ``FULL``, the layers read only the cache's live prefix: the smallest
    of :func:`levanter.ops.attention.live_buckets` holding every row's earlier positions, chosen on
    the device (``hk.switch``: one program serves every length, each branch reading its own prefix);
    what lies past it is never read."""
    cached = Impl(decode=impl.decode, interpret=impl.interpret)

    def stack(n: int) -> Callable[..., Any]:
        # Each layer cuts its own ``[b, n]`` block out of the stack's cache, by the layer's index: a
        # cut of the stack before the scan is a copy of it, and a cut of the layer's whole slice
        # (the scan's) is made after XLA has moved that whole slice.
        def layers(h: jax.Array, k: jax.Array, v: jax.Array) -> Any:
            def block(x: jax.Array, layer: jax.Array) -> tuple[jax.Array, KVCache]:
                def cut(c: jax.Array) -> jax.Array:
                    return jax.lax.dynamic_slice(c, (layer, 0, 0, 0), (1, c.shape[1], n, c.shape[3]))[0]

                return _layer(config, _no_shard, cached, x, None, positions, KVCache(cut(k), cut(v)))

            return hk.layer_stack(config.num_layers, with_per_layer_inputs=True, name=LAYERS)(block)(
                h, jnp.arange(config.num_layers))

        return layers

    with hk.custom_getter(_cast_getter(compute_dtype)):
        embed = hk.Embed(config.vocab_size, config.hidden_dim, w_init=_init(0.02), name="embed")
        x = embed(tokens).astype(compute_dtype)
        length = cache.k.shape[2]
        sizes = [length] if resolve_decode(impl.decode) is Decode.FULL else live_buckets(length)
        if len(sizes) == 1:
            x, (k, v) = stack(length)(x, cache.k, cache.v)
        else:  # a row reads the positions before its run
            index = jnp.searchsorted(jnp.asarray(sizes), jnp.max(positions[:, 0]))
            x, (k, v) = hk.switch(index, [stack(n) for n in sizes], x, cache.k, cache.v)
        return _RMSNorm(config.norm_eps, name="final_norm")(x), cache.write(k, v, positions, cached)


def llama_forward(config: LlamaConfig, tokens: jax.Array, compute_dtype: Any = jnp.float32,
                  shard: Shard | None = None, segment_ids: jax.Array | None = None, impl: Impl = Impl()) -> jax.Array:
    """Logits ``[batch, seq, vocab]`` (float32) for int tokens ``[batch, seq]``; call inside ``hk.transform``.

    The same as :func:`llama_hidden` followed by the output head (the tied embedding, or ``lm_head``).
    ``shard`` places activations on a device mesh (``levanter.sharding.activation_sharder``); None
    leaves placement to XLA. Training and scoring use the hidden states and the head a block at a
    time instead (``levanter.ops.cross_entropy``): the full logits are large.
    """
    shard = shard or _no_shard
    x, table = _trunk(config, tokens, compute_dtype, shard, segment_ids, impl)
    with hk.custom_getter(_cast_getter(compute_dtype)):
        if config.tie_embeddings:
            logits = jnp.einsum("btd,vd->btv", x, table.astype(x.dtype), preferred_element_type=jnp.float32)
        else:
            logits = hk.Linear(config.vocab_size, with_bias=False, w_init=_init(0.02), name="lm_head")(x)
    return shard(logits, ("batch", None, "vocab")).astype(jnp.float32)


class LlamaModel:
    """A Llama's Haiku transform, and what the loss and scoring need besides logits.

    ``init(rng, tokens)`` makes the parameters in the stacked layout (``levanter.models.layout``),
    with the same values as the per-layer model always made (the per-layer init is run, then
    stacked: one random stream, one result, whatever the layout). ``apply(params, rng, tokens,
    segment_ids=None)`` returns float32 logits; :meth:`hidden` the final hidden states and
    :meth:`head` the ``[hidden, vocab]`` output projection, for the blockwise softmax.
    """

    def __init__(self, config: LlamaConfig, compute_dtype: Any = jnp.float32, shard: Shard | None = None,
                 impl: Impl = Impl()):
        self.config, self.compute_dtype, self.impl = config, compute_dtype, impl
        self._logits = hk.transform(lambda tokens, segment_ids=None: llama_forward(
            config, tokens, compute_dtype, shard, segment_ids, impl))
        self._hidden = hk.transform(lambda tokens, segment_ids=None: llama_hidden(
            config, tokens, compute_dtype, shard, segment_ids, impl))
        per_layer = Impl(remat=Remat.NONE, attention=Attention.XLA, scan_layers=False)
        self._per_layer = hk.transform(lambda tokens: llama_forward(config, tokens, jnp.float32, None, None, per_layer))
        self._cached = hk.transform(lambda tokens, positions, cache: llama_cached(
            config, tokens, positions, cache, compute_dtype, impl))

    def init(self, rng: jax.Array, tokens: jax.Array) -> dict[str, Any]:
        """Fresh float32 parameters (stacked layout, unless ``impl.scan_layers`` is off)."""
        params = dict(self._per_layer.init(rng, tokens))
        return stack_layers(params) if self.impl.scan_layers else params

    def apply(self, params: Any, rng: Any, tokens: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
        """Logits ``[batch, seq, vocab]``, float32."""
        return self._logits.apply(params, rng, tokens, segment_ids=segment_ids)

    def hidden(self, params: Any, tokens: jax.Array, segment_ids: jax.Array | None = None) -> jax.Array:
        """Final hidden states ``[batch, seq, hidden]`` in the compute dtype."""
        return self._hidden.apply(params, None, tokens, segment_ids=segment_ids)

    def empty_cache(self, batch: int, length: int) -> KVCache:
        """A key/value cache for ``batch`` rows of up to ``length`` positions, in the compute dtype."""
        c = self.config
        shape = (c.num_layers, batch, length, c.num_kv_heads * c.head_dim)
        return KVCache(jnp.zeros(shape, self.compute_dtype), jnp.zeros(shape, self.compute_dtype))

    def cached_hidden(self, params: Any, tokens: jax.Array, positions: jax.Array,
                      cache: KVCache) -> tuple[jax.Array, KVCache]:
        """Final hidden states of ``tokens`` at ``positions`` over ``cache``, and the cache with them
        written (:func:`llama_cached`; stacked parameters)."""
        return self._cached.apply(params, None, tokens, positions, cache)

    def head(self, params: Any) -> jax.Array:
        """The output projection ``[hidden, vocab]`` in the compute dtype (the tied embedding's transpose)."""
        w, vocab_rows = stored_head(params, self.config.tie_embeddings)
        return (w.T if vocab_rows else w).astype(self.compute_dtype)


def transformed_llama(config: LlamaConfig, compute_dtype: Any = jnp.float32, shard: Shard | None = None,
                      impl: Impl = Impl()) -> LlamaModel:
    """The model ``config`` describes: ``init(rng, tokens)`` / ``apply(params, None, tokens, segment_ids=None)``
    and the hidden states and head (:class:`LlamaModel`)."""
    return LlamaModel(config, compute_dtype, shard, impl)
