"""Writing a decoder's new keys and values into its key/value cache, two ways: XLA's batched update
(any device) and a Pallas kernel that copies each row's new entries in place (TPU; on a CPU in
Pallas' interpret mode, for tests). They write the same values; which one runs is a choice of speed
(``levanter.models.impl.Decode``), not part of a run's identity.

XLA lowers the batched update (one start position per row) to a scatter, which a TPU runs as a loop
over the rows, a few small programs each, at every decode step; the kernel reads each row's tile of
positions, patches it and writes it back, the rows' DMAs overlapped, with the cache aliased to its
output so nothing else of it moves.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["write_rows"]


_TILE_ROWS = 8
"""Positions per tile of the cache's second-to-last axis on a TPU: a DMA may start only at a multiple."""

_CHUNK_BYTES = 4 * 2**20
"""VMEM the kernel holds at once (tiles of this many rows are read, patched and written back together)."""


def write_rows(cache: jax.Array, new: jax.Array, starts: jax.Array, *, kernel: bool = False,
               interpret: bool = False) -> jax.Array:
    """``cache [layers, b, s, width]`` with each row ``r``'s ``new [layers, b, t, width]`` written at
    positions ``starts[r]`` on (a start past ``s - t`` is moved back to it, as
    ``jax.lax.dynamic_update_slice`` does).

    Args:
        kernel: write a decode step's token (``t == 1``) with the Pallas kernel (TPU, or Pallas'
            interpreter with ``interpret``) when ``s`` is a whole number of tiles (8 positions);
            a longer run (a prompt, one row at a time) is one XLA update either way.
        interpret: run the kernel in Pallas' interpreter (any backend, slow: for tests).
    """
    new = new.astype(cache.dtype)
    if kernel and new.shape[2] == 1 and cache.shape[2] % _TILE_ROWS == 0:
        return _kernel_write(cache, new, jnp.clip(starts.astype(jnp.int32), 0, cache.shape[2] - 1), interpret)

    def put(rows: jax.Array, row_new: jax.Array, start: jax.Array) -> jax.Array:
        return jax.lax.dynamic_update_slice(rows, row_new, (0, start, 0))

    return jax.vmap(put, in_axes=(1, 1, 0), out_axes=1)(cache, new, starts)


def _kernel_write(cache: jax.Array, new: jax.Array, starts: jax.Array, interpret: bool) -> jax.Array:
    """Each row's token written by reading the aligned tile of positions that holds it (all
    layers), setting its row, and writing the tile back: a DMA cannot start inside a tile."""
    # Imported here: Pallas' TPU module is loaded only by a program that uses the kernel.
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    layers, rows, _, width = cache.shape
    tile = (layers, _TILE_ROWS, width)
    chunk = max(1, min(rows, _CHUNK_BYTES // (math.prod(tile) * cache.dtype.itemsize)))

    def body(starts_ref: Any, new_ref: Any, _cache_in: Any, cache_ref: Any, tiles: Any, sem: Any) -> None:
        def at(r: int) -> Any:
            first = pl.multiple_of(starts_ref[r] // _TILE_ROWS * _TILE_ROWS, _TILE_ROWS)
            return cache_ref.at[:, r, pl.ds(first, _TILE_ROWS)]

        for lo in range(0, rows, chunk):
            group = range(lo, min(rows, lo + chunk))
            # Every copy of a group is started before any is waited for: the DMAs overlap.
            _copy_all([pltpu.make_async_copy(at(r), tiles.at[r - lo], sem) for r in group])
            for r in group:
                mine = jax.lax.broadcasted_iota(jnp.int32, tile, 1) == starts_ref[r] % _TILE_ROWS
                tiles[r - lo] = jnp.where(mine, jnp.broadcast_to(new_ref[:, r], tile), tiles[r - lo])
            _copy_all([pltpu.make_async_copy(tiles.at[r - lo], at(r), sem) for r in group])

    anywhere = pl.BlockSpec(memory_space=pl.ANY)  # left in HBM: the kernel moves only the tiles it patches
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(new.shape, lambda i, starts: (0, 0, 0, 0)), anywhere],
            out_specs=anywhere, scratch_shapes=[pltpu.VMEM((chunk, *tile), cache.dtype), pltpu.SemaphoreType.DMA(())]),
        # Operand 2 (the cache, after the prefetched starts and the new rows) is the output's buffer.
        input_output_aliases={2: 0}, interpret=interpret, name="kv_cache_write_rows")(starts, new, cache)


def _copy_all(copies: list[Any]) -> None:
    for copy in copies:
        copy.start()
    for copy in copies:
        copy.wait()
