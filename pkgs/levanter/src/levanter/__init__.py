"""levanter: JAX training with Haiku models, Optax optimizers, Grain input and Orbax checkpoints."""

from levanter.checkpoint import CheckpointConfig
from levanter.data import DatasetSpec
from levanter.generate import generate, load_final_model
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig, Schedule
from levanter.trainer import ComputeDtype, NonFiniteLossError, TrainerConfig, TrainingPreempted, main

__all__ = [
    "AdamConfig",
    "CheckpointConfig",
    "ComputeDtype",
    "DatasetSpec",
    "LlamaConfig",
    "NonFiniteLossError",
    "Schedule",
    "TrainerConfig",
    "TrainingPreempted",
    "generate",
    "load_final_model",
    "main",
]
