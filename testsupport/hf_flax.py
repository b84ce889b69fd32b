"""transformers' Flax Llama on a Hugging Face folder, as the tests compare against it."""

from __future__ import annotations

from typing import Any


def flax_llama(folder: str) -> Any:
    """``FlaxLlamaForCausalLM`` of the exported model in ``folder`` (float32 weights).

    Reading PyTorch-format weights, transformers first draws the model's random weights (then replaced
    by the file's) and runs its forward pass, op by op: about a hundred programs, 2 CPU seconds of
    compiling here. Jitted, that initialisation is one program.
    """
    import jax
    import jax.numpy as jnp
    from transformers import FlaxLlamaForCausalLM

    init = FlaxLlamaForCausalLM.init_weights

    def jitted(self: Any, rng: Any, shape: Any, params: Any = None) -> Any:
        return jax.jit(lambda r: init(self, r, shape, params))(rng)

    FlaxLlamaForCausalLM.init_weights = jitted  # pyright: ignore[reportAttributeAccessIssue]
    try:
        return FlaxLlamaForCausalLM.from_pretrained(folder, from_pt=True, dtype=jnp.float32)
    finally:
        FlaxLlamaForCausalLM.init_weights = init
