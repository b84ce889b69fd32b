"""The device side of benchmark evaluation: jitted forward passes over packed ``[batch, seq_len]`` rows.

One program, compiled once per shape: :meth:`PackedModel.score` (the log-probability of a target
at every position, and whether it is the argmax). Generation runs the key/value-cache decoder
(``levanter.inference``) instead. On a mesh the parameters follow the
trainer's sharding rules (``levanter.sharding``) and rows are split over its batch axes, so the
model a trainer holds can be evaluated where it is.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from levanter.models.layout import is_per_layer, stack_layers
from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.ops.cross_entropy import token_scores
from levanter.sharding import activation_sharder, batch_spec, tree_shardings

__all__ = ["PackedModel"]


class PackedModel:
    """A Llama and its parameters, answering packed batches of ``batch_size`` rows of ``seq_len`` tokens.

    Args:
        config: the model's shape.
        params: its parameters (a Haiku params tree; numpy or JAX arrays, sharded or not).
        batch_size: rows per batch; on a mesh, a multiple of its ``data x fsdp`` batch shards.
        seq_len: tokens per row.
        compute_dtype: the forward pass's precision.
        mesh: a ``jax.sharding.Mesh`` with levanter's axes (None: the default device).

    Raises:
        ValueError: ``batch_size`` does not split over the mesh's batch shards.
    """

    def __init__(self, config: LlamaConfig, params: Any, *, batch_size: int, seq_len: int,
                 compute_dtype: Any = jnp.float32, mesh: Any = None):
        self.config, self.batch_size, self.seq_len, self.mesh = config, batch_size, seq_len, mesh
        units = {"heads": config.num_heads, "kv_heads": config.num_kv_heads}
        if is_per_layer(params):
            params = stack_layers(params)
        if mesh is not None:
            shards = mesh.shape["data"] * mesh.shape["fsdp"]
            if batch_size % shards:
                raise ValueError(f"batch_size {batch_size} must be divisible by the {shards} batch shards "
                                 f"(data x fsdp) of mesh {dict(mesh.shape)}")
            self._rows: Any = NamedSharding(mesh, P(*batch_spec()))
            self.params = jax.device_put(params, tree_shardings(params, mesh, units))
            model = transformed_llama(config, compute_dtype, shard=activation_sharder(mesh, units))
        else:
            self._rows = None
            self.params = jax.tree.map(jnp.asarray, params)
            model = transformed_llama(config, compute_dtype)

        # The model casts each weight to compute_dtype where it reads it; the softmax over the
        # vocabulary runs a block of positions at a time (the full logits are never held).
        def score(params: Any, tokens: jax.Array, segments: jax.Array,
                  targets: jax.Array) -> tuple[jax.Array, jax.Array]:
            return token_scores(model.hidden(params, tokens, segment_ids=segments), model.head(params), targets)

        self._score = jax.jit(score)

    def place(self, array: np.ndarray) -> jax.Array:
        """``[batch_size, ...]`` rows on the device (split over the mesh's batch axes)."""
        if array.shape[0] != self.batch_size or array.shape[1] != self.seq_len:
            raise ValueError(f"expected [{self.batch_size}, {self.seq_len}] rows, got {list(array.shape)}")
        return jax.device_put(array, self._rows) if self._rows is not None else jnp.asarray(array)

    def score(self, tokens: np.ndarray, segments: np.ndarray, targets: np.ndarray) -> tuple[jax.Array, jax.Array]:
        """``(log p(target), target is the argmax)`` at every position, ``[batch_size, seq_len]`` each.

        Returned without waiting for the device (JAX dispatches asynchronously), so the caller can
        queue the next batch before reading this one.
        """
        return self._score(self.params, self.place(tokens), self.place(segments), self.place(targets))
