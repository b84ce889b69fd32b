"""A tiny trainer config shared by the trainer tests and their subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from levanter.checkpoint import CheckpointConfig
from levanter.data import DatasetSpec
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from levanter.trainer import TrainerConfig, config_to_dict


def tiny_config(data: str, out: str, **overrides) -> TrainerConfig:
    """Nano-sized model, 8 x 32 batches, float32, checkpoints every 2 steps."""
    base = dict(
        model=LlamaConfig(vocab_size=64, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=1,
                          num_layers=2, max_seq_len=64),
        optimizer=AdamConfig(learning_rate=3e-3, warmup=2, weight_decay=0.1),
        datasets=(DatasetSpec(data),),
        output_path=out,
        batch_size=8,
        seq_len=32,
        num_train_steps=2,
        eval_batches=2,
        checkpoint=CheckpointConfig(save_every=2, keep_last=2),
        peak_flops_per_device=1e11,
    )
    base.update(overrides)
    return TrainerConfig(**base)


def start_trainer(config: TrainerConfig, config_path: str, *, devices: int = 1) -> subprocess.Popen:
    """Start ``python -m levanter.trainer`` on ``config`` in a new process (``devices`` CPU devices)."""
    with open(config_path, "w") as f:
        json.dump(config_to_dict(config), f)
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.Popen([sys.executable, "-m", "levanter.trainer", config_path], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def final_params(out: str) -> dict[str, np.ndarray]:
    """The flattened final parameters of a finished run."""
    with np.load(os.path.join(out, "final", "params.npz")) as f:
        return {k: f[k] for k in f.files}
