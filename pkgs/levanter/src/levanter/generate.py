"""Sampling token ids from a trained model's final parameters."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from levanter.models.family import RUN_CONFIG_FILE, ModelConfig, read_model_config
from levanter.models.layout import is_per_layer, stack_layers
from rigging import filesystem as fs

__all__ = ["generate", "load_final_model", "load_model", "read_model_config"]


def load_final_model(output_path: str) -> tuple[ModelConfig, dict[str, Any]]:
    """Read ``<output_path>/config.json`` and ``<output_path>/final/params.npz`` of a training run.

    Raises:
        FileNotFoundError: the run has not finished (no final parameters).
    """
    return load_model(output_path)


def load_model(output_path: str, step: int | None = None) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and parameters of a training run: final (``step`` None) or checkpoint ``step``.

    Raises:
        FileNotFoundError: the run has not finished, or checkpoint ``step`` is not (or no longer) kept.
    """
    from levanter.checkpoint import checkpoint_dir, read_checkpoint_params

    config_path = fs.join(output_path, RUN_CONFIG_FILE)
    if not fs.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found: {output_path} is not a training run's output")
    config = read_model_config(output_path)
    if step is not None:
        params = jax.tree.map(jnp.asarray, read_checkpoint_params(checkpoint_dir(output_path), step))
        return config, params
    params_path = fs.join(output_path, "final", "params.npz")
    if not fs.exists(params_path):
        raise FileNotFoundError(f"{params_path} not found: training under {output_path} has not finished")
    with np.load(io.BytesIO(fs.read_bytes(params_path))) as flat:
        params: dict[str, dict[str, Any]] = {}
        for key in flat.files:
            module, name = key.rsplit("/", 1)
            params.setdefault(module, {})[name] = jnp.asarray(flat[key])
    # A run finished before the layers were stacked saved them one by one.
    return config, stack_layers(params) if is_per_layer(params) else params


def generate(config: ModelConfig, params: dict[str, Any], prompt: Sequence[int], *, max_new_tokens: int = 32,
             temperature: float = 0.0, seed: int = 0, eos_id: int | None = None) -> list[int]:
    """Continue ``prompt`` by up to ``max_new_tokens`` ids; returns only the new ids.

    ``temperature == 0`` is greedy; otherwise ids are sampled from ``softmax(logits / temperature)``.
    Generation stops after ``eos_id`` (included) or at ``config.max_seq_len`` total tokens.
    The whole context is recomputed per token in a fixed-size buffer (one compilation), which is
    cheap at the sizes sampled from the command line.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    ids = [int(t) for t in prompt]
    if not ids:
        raise ValueError("prompt must hold at least one token id")
    if any(t < 0 or t >= config.vocab_size for t in ids):
        raise ValueError(f"prompt ids must be in [0, {config.vocab_size}), got {ids}")
    length = min(len(ids) + max_new_tokens, config.max_seq_len)
    if len(ids) >= length:
        return []
    model = config.build()
    if is_per_layer(params):
        params = stack_layers(params)

    @jax.jit
    def next_token(params: Any, buffer: jax.Array, position: jax.Array, key: jax.Array) -> jax.Array:
        # Causal attention means the padding after ``position`` cannot change its logits; only the
        # position's logits are made (not the whole buffer's).
        hidden = model.hidden(params, buffer[None, :])[0, position]
        logits = jnp.dot(hidden, model.head(params), preferred_element_type=jnp.float32)
        if temperature == 0:
            return jnp.argmax(logits)
        return jax.random.categorical(key, logits / temperature)

    buffer = np.zeros(length, dtype=np.int32)
    buffer[:len(ids)] = ids
    key = jax.random.PRNGKey(seed)
    out: list[int] = []
    for position in range(len(ids) - 1, length - 1):
        key, sub = jax.random.split(key)
        token = int(next_token(params, jnp.asarray(buffer), jnp.int32(position), sub))
        buffer[position + 1] = token
        out.append(token)
        if eos_id is not None and token == eos_id:
            break
    return out
