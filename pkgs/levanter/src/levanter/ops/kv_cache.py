"""Writing a decoder's new keys and values into its key/value cache, two ways: XLA's batched update
(any device) and a Pallas kernel that copies each row's new entries in place (TPU; on a CPU in
Pallas' interpret mode, for tests). They write the same values; which one runs is a choice of speed
(``levanter.models.impl.Decode``), not part of a run's identity.

XLA lowers the batched update (one start position per row) to a scatter, which a TPU runs as a loop
over the rows, a few small programs each, at every decode step; the kernel issues one DMA a row and
waits for them together, with the cache aliased to its output so nothing else of it moves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["write_rows"]


def write_rows(cache: jax.Array, new: jax.Array, starts: jax.Array, *, kernel: bool = False,
               interpret: bool = False) -> jax.Array:
    """``cache [layers, b, s, kv_heads, d]`` with each row ``r``'s ``new [layers, b, t, kv_heads, d]``
    written at positions ``starts[r]`` on (a start past ``s - t`` is moved back to it, as
    ``jax.lax.dynamic_update_slice`` does).

    Args:
        kernel: write with the Pallas kernel (TPU, or Pallas' interpreter with ``interpret``).
        interpret: run the kernel in Pallas' interpreter (any backend, slow: for tests).
    """
    new = new.astype(cache.dtype)
    if not kernel:
        def put(rows: jax.Array, row_new: jax.Array, start: jax.Array) -> jax.Array:
            return jax.lax.dynamic_update_slice(rows, row_new, (0, start, 0, 0))

        return jax.vmap(put, in_axes=(1, 1, 0), out_axes=1)(cache, new, starts)
    starts = jnp.clip(starts.astype(jnp.int32), 0, cache.shape[2] - new.shape[2])
    return _kernel_write(cache, new, starts, interpret)


def _kernel_write(cache: jax.Array, new: jax.Array, starts: jax.Array, interpret: bool) -> jax.Array:
    # Imported here: Pallas' TPU module is loaded only by a program that uses the kernel.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    rows, t = cache.shape[1], new.shape[2]

    def body(starts_ref: jax.Array, new_ref: jax.Array, _cache_in: jax.Array, cache_ref: jax.Array,
             sem: jax.Array) -> None:
        # Every row's copy is started before any is waited for: the DMAs overlap.
        copies = [pltpu.make_async_copy(new_ref.at[:, r], cache_ref.at[:, r, pl.ds(starts_ref[r], t)], sem)
                  for r in range(rows)]
        for copy in copies:
            copy.start()
        for copy in copies:
            copy.wait()

    anywhere = pl.BlockSpec(memory_space=pl.ANY)  # left in HBM: the kernel moves only what it copies
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(1,), in_specs=[anywhere, anywhere],
                                               out_specs=anywhere, scratch_shapes=[pltpu.SemaphoreType.DMA(())]),
        # Operand 2 (the cache, after the prefetched starts and the new rows) is the output's buffer.
        input_output_aliases={2: 0}, interpret=interpret, name="kv_cache_write_rows")(starts, new, cache)
