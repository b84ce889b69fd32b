"""Model definitions (configs import no JAX; the Haiku modules load when a model is built)."""

from levanter.models.family import (
    DEFAULT_FAMILY,
    MODEL_FAMILIES,
    ModelConfig,
    model_config_from_dict,
    model_family,
)
from levanter.models.llama import LlamaConfig, llama_forward, transformed_llama

__all__ = [
    "DEFAULT_FAMILY",
    "MODEL_FAMILIES",
    "LlamaConfig",
    "ModelConfig",
    "llama_forward",
    "model_config_from_dict",
    "model_family",
    "transformed_llama",
]
