"""Sampling token ids from a trained model's final parameters."""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from levanter.models.family import RUN_CONFIG_FILE, ModelConfig, read_model_config
from levanter.models.layout import is_per_layer, stack_layers
from rigging import filesystem as fs

__all__ = ["generate", "generate_by_recompute", "load_final_model", "load_model", "read_model_config", "read_params_file"]


def load_final_model(output_path: str, *, ema: bool = False) -> tuple[ModelConfig, dict[str, Any]]:
    """Read ``<output_path>/config.json`` and the final parameters of a training run (see :func:`load_model`).

    Raises:
        FileNotFoundError: the run has not finished (no final parameters).
    """
    return load_model(output_path, ema=ema)


def load_model(output_path: str, step: int | None = None, *, ema: bool = False) -> tuple[ModelConfig, dict[str, Any]]:
    """The model config and parameters of a training run: final (``step`` None) or checkpoint ``step``.

    With ``ema``, the run's average of its parameters (``levanter.ema``) instead of the parameters.
    A LoRA run's adapters (``levanter.lora``) come back folded into its base: the parameters are
    those the adapted model computes with.

    Raises:
        FileNotFoundError: the run has not finished, checkpoint ``step`` is not (or no longer) kept,
            or ``ema`` is asked of a run that kept no average.
    """
    from levanter.checkpoint import checkpoint_dir, read_checkpoint_params
    from levanter.ema import EMA_PARAMS_FILE
    from levanter.training.final import PARAMS_FILE

    config_path = fs.join(output_path, RUN_CONFIG_FILE)
    if not fs.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found: {output_path} is not a training run's output")
    config = read_model_config(output_path)
    if step is not None:
        params = jax.tree.map(jnp.asarray, read_checkpoint_params(checkpoint_dir(output_path), step, ema=ema))
    else:
        params_path = fs.join(output_path, "final", EMA_PARAMS_FILE if ema else PARAMS_FILE)
        if not fs.exists(params_path):
            raise FileNotFoundError(
                f"{params_path} not found: " + (f"the run under {output_path} kept no average of its parameters "
                                                "(train it with ema=...)" if ema and fs.exists(
                                                    fs.join(output_path, "final", PARAMS_FILE))
                                                else f"training under {output_path} has not finished"))
        params = read_params_file(params_path)
    return config, _with_base(output_path, config, params)


def read_params_file(path: str) -> dict[str, dict[str, Any]]:
    """Parameters saved by ``levanter.training.final.save_final_params`` (one array per ``module/name``)."""
    with np.load(io.BytesIO(fs.read_bytes(path))) as flat:
        params: dict[str, dict[str, Any]] = {}
        for key in flat.files:
            module, name = key.rsplit("/", 1)
            params.setdefault(module, {})[name] = jnp.asarray(flat[key])
    # A run finished before the layers were stacked saved them one by one.
    return stack_layers(params) if is_per_layer(params) else params


def _with_base(output_path: str, config: ModelConfig, params: dict[str, Any]) -> dict[str, Any]:
    """``params``, or for a LoRA run's output the adapters ``params`` folded into its base."""
    from levanter.initialize import initial_params, initialize_from_dict
    from levanter.lora import fold, read_lora_file

    lora = read_lora_file(output_path)
    if lora is None:
        return params
    lora_config, base = lora
    start = initialize_from_dict(base)
    if start is None:
        raise ValueError(f"{output_path}: its lora.json names no base model")
    return fold(initial_params(start, config), params, lora_config.scale)


def generate(config: ModelConfig, params: dict[str, Any], prompt: Sequence[int], *, max_new_tokens: int = 32,
             temperature: float = 0.0, seed: int = 0, eos_id: int | None = None, top_k: int = 0,
             top_p: float = 1.0) -> list[int]:
    """Continue ``prompt`` by up to ``max_new_tokens`` ids; returns only the new ids.

    ``temperature == 0`` is greedy; otherwise ids are drawn from ``softmax(logits / temperature)``
    after ``top_k`` and ``top_p`` (``levanter.inference.SamplingParams``). Generation stops after
    ``eos_id`` (included) or at ``config.max_seq_len`` total tokens. Runs the key/value-cache decoder
    (``levanter.inference.Engine``); :func:`generate_by_recompute` is the reference it equals.
    """
    from levanter.inference import Engine, SamplingParams

    ids = _checked_prompt(config, prompt, temperature, max_new_tokens)
    room = min(max_new_tokens, config.max_seq_len - len(ids))
    if room <= 0:
        return []
    sampling = SamplingParams(max_tokens=room, temperature=float(temperature), top_k=top_k, top_p=top_p, seed=seed,
                              stop_token_ids=() if eos_id is None else (eos_id,))
    model = config.build()
    if is_per_layer(params):
        params = stack_layers(params)
    engine = Engine(model, params, slots=1, max_len=config.max_seq_len, steps_per_sync=min(room, 64))
    return engine.generate([ids], sampling)[0].token_ids


def _checked_prompt(config: ModelConfig, prompt: Sequence[int], temperature: float, max_new_tokens: int) -> list[int]:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    ids = [int(t) for t in prompt]
    if not ids:
        raise ValueError("prompt must hold at least one token id")
    if any(t < 0 or t >= config.vocab_size for t in ids):
        raise ValueError(f"prompt ids must be in [0, {config.vocab_size}), got {ids}")
    return ids


@functools.partial(jax.jit, static_argnums=0)
def _greedy_next(config: ModelConfig, params: Any, buffer: jax.Array, position: jax.Array) -> jax.Array:
    """The greedy token after ``position`` of ``buffer``: one program per config and buffer length,
    shared by every call (a jit made per call traced and compiled again for each prompt)."""
    model = config.build()
    # Causal attention means the padding after ``position`` cannot change its logits; only the
    # position's logits are made (not the whole buffer's).
    hidden = model.hidden(params, buffer[None, :])[0, position]
    return jnp.argmax(jnp.dot(hidden, model.head(params), preferred_element_type=jnp.float32))


def generate_by_recompute(config: ModelConfig, params: dict[str, Any], prompt: Sequence[int], *,
                          max_new_tokens: int = 32, eos_id: int | None = None) -> list[int]:
    """Greedy continuation by recomputing the whole context for every new token (quadratic, one
    trip to the host per token): the reference the cached decoder is tested and measured against."""
    ids = _checked_prompt(config, prompt, 0.0, max_new_tokens)
    length = min(len(ids) + max_new_tokens, config.max_seq_len)
    if len(ids) >= length:
        return []
    if is_per_layer(params):
        params = stack_layers(params)
    buffer = np.zeros(length, dtype=np.int32)
    buffer[:len(ids)] = ids
    out: list[int] = []
    for position in range(len(ids) - 1, length - 1):
        token = int(_greedy_next(config, params, jnp.asarray(buffer), jnp.int32(position)))
        buffer[position + 1] = token
        out.append(token)
        if eos_id is not None and token == eos_id:
            break
    return out
