"""levanter: JAX training with Haiku models, Optax optimizers, Grain input and Orbax checkpoints.

Names are loaded on first use, so ``from levanter import AdamConfig`` does not import JAX.
"""

from __future__ import annotations

from rigging.lazy import lazy_getattr

__all__ = [
    "AdamConfig",
    "CheckpointConfig",
    "ComputeDtype",
    "DataConfig",
    "DatasetSpec",
    "DecayShape",
    "LlamaConfig",
    "NonFiniteLossError",
    "Schedule",
    "TrainLmConfig",
    "TrainSummary",
    "TrainerConfig",
    "TrainingPreempted",
    "WandbConfig",
    "generate",
    "load_final_model",
    "load_model",
    "main",
]

_WHERE = {
    "AdamConfig": "levanter.optim",
    "Schedule": "levanter.optim",
    "DecayShape": "levanter.optim",
    "CheckpointConfig": "levanter.checkpoint",
    "DatasetSpec": "levanter.data.spec",
    "LlamaConfig": "levanter.models.llama",
    "generate": "levanter.generate",
    "load_final_model": "levanter.generate",
    "load_model": "levanter.generate",
    "ComputeDtype": "levanter.config",
    "DataConfig": "levanter.config",
    "TrainLmConfig": "levanter.config",
    "TrainerConfig": "levanter.config",
    "WandbConfig": "levanter.config",
    "TrainSummary": "levanter.summary",
    "NonFiniteLossError": "levanter.trainer",
    "TrainingPreempted": "levanter.trainer",
    "main": "levanter.trainer",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
