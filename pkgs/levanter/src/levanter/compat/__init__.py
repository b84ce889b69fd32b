"""Reading and writing other ecosystems' model formats (Hugging Face)."""

from levanter.compat.hf_checkpoint import (
    HfCheckpointError,
    hf_config,
    llama_config_from_hf,
    load_hf_params,
    save_hf_model,
)

__all__ = ["HfCheckpointError", "hf_config", "llama_config_from_hf", "load_hf_params", "save_hf_model"]
