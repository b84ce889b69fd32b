"""Model definitions (configs import no JAX; the Haiku modules load when a model is built)."""

from levanter.models.llama import LlamaConfig, llama_forward, transformed_llama

__all__ = ["LlamaConfig", "llama_forward", "transformed_llama"]
