"""Model definitions (Haiku)."""

from levanter.models.llama import LlamaConfig, llama_forward, transformed_llama

__all__ = ["LlamaConfig", "llama_forward", "transformed_llama"]
