"""Cheap stand-ins for training runs, for the sweep tests (step workers import them from this module).

A toy trial writes ``train_summary.json`` as a training step does, its ``val_loss`` a known
function of its config, so a sweep's proposals, objectives and best trial can be checked in
milliseconds. Calls are counted per step name across processes (``counter_dir``, not hashed).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

from marin.execution.core.lazy import StepHandle
from marin.execution.core.step import unhashed_field
from marin.execution.run.worker import current_step
from marin.experiment.training.train import TrainLmConfig
from rigging import filesystem as fs

CALLS = "calls.txt"


@dataclass(frozen=True)
class ToyConfig:
    """What a toy trial "trains": its loss is lowest at lr=1e-2, warmup=5, kind="b".

    Attributes:
        lr: a learning rate.
        warmup: warmup steps.
        kind: "a" or "b".
        sleep_at: the ``sleep_at``-th toy call (counted over every trial) sleeps ``sleep`` seconds
            first, once, so a runner can be killed mid-sweep.
        sleep: how long.
        counter_dir: where calls are counted.
    """

    lr: float = 1e-3
    warmup: int = 0
    kind: str = "a"
    sleep_at: int = unhashed_field(default=0)
    sleep: float = unhashed_field(default=0.0)
    counter_dir: str = unhashed_field(default="")


def _count(counter_dir: str, label: str) -> int:
    """Count a call of ``label``; returns how many calls of any label came before, plus one."""
    if not counter_dir:
        return 0
    os.makedirs(counter_dir, exist_ok=True)
    path = os.path.join(counter_dir, CALLS)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{label}\n".encode())
    finally:
        os.close(fd)
    with open(path) as f:
        return sum(1 for _ in f)


def calls(counter_dir: str) -> dict[str, int]:
    """How many times each step name ran."""
    path = os.path.join(counter_dir, CALLS)
    counts: dict[str, int] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                counts[line.strip()] = counts.get(line.strip(), 0) + 1
    return counts


def toy_loss(config: ToyConfig) -> float:
    return (math.log10(config.lr) + 2.0) ** 2 + 0.01 * (config.warmup - 5) ** 2 + (0.0 if config.kind == "b" else 0.5)


def toy_train(config: ToyConfig, output_path: str) -> None:
    """Step function: "train" and write ``train_summary.json`` (and the "parameters")."""
    running = current_step()
    n = _count(config.counter_dir, running.name if running else "?")
    if config.sleep and n == config.sleep_at:
        time.sleep(config.sleep)
    loss = toy_loss(config)
    fs.atomic_write(fs.join(output_path, "train_summary.json"),
                    json.dumps({"final_loss": loss + 0.1, "val_loss": loss, "steps": 3, "start_step": 0}))
    fs.atomic_write(fs.join(output_path, "final", "params.npz"), f"params of lr={config.lr!r}")


class ToyTrial(StepHandle, fn=toy_train):
    """A toy trial."""


def fake_train(config: TrainLmConfig, output_path: str) -> None:
    """Step function: a "training run" of a real training config, its val_loss a function of its
    learning rate and warmup, written as the trainer's summary is (FLOPs fields included)."""
    lr, warmup = config.optimizer.learning_rate, config.optimizer.warmup
    loss = (math.log10(lr) + 2.0) ** 2 + 0.01 * (warmup - 5) ** 2 + 3.0
    tokens = config.trainer.num_train_steps * config.trainer.batch_size * config.trainer.seq_len
    fs.atomic_write(fs.join(output_path, "train_summary.json"), json.dumps({
        "final_loss": loss + 0.1, "val_loss": loss, "steps": config.trainer.num_train_steps, "start_step": 0,
        "num_params": config.model.num_params(), "model_flops": 6.0 * config.model.num_params() * tokens,
        "mfu": 0.25}))


class FakeTrain(StepHandle, fn=fake_train):
    """A training config "trained" by :func:`fake_train`."""


@dataclass(frozen=True)
class LawConfig:
    """A run of ``params`` parameters on ``tokens`` tokens whose loss follows a known scaling law."""

    params: float
    tokens: float


def law_loss(params: float, tokens: float) -> float:
    return 1.69 + 406.4 / params ** 0.34 + 410.7 / tokens ** 0.28


def law_run(config: LawConfig, output_path: str) -> None:
    """Step function: write the summary a training run of this size would, its loss from the law."""
    fs.atomic_write(fs.join(output_path, "train_summary.json"), json.dumps({
        "val_loss": law_loss(config.params, config.tokens), "num_params": config.params, "steps": 10,
        "start_step": 0, "model_flops": 6.0 * config.params * config.tokens}))


class LawRun(StepHandle, fn=law_run):
    """A stand-in run of a scaling ladder."""


MIX_BEST = {"/data/web": 0.5, "/data/books": 0.3, "/data/code": 0.2}
"""The mixture a :func:`mix_train` run's val_loss is lowest at."""


def mix_loss(weights: dict[str, float]) -> float:
    total = sum(weights.values())
    return 3.0 + 10.0 * sum((weights[name] / total - best) ** 2 for name, best in MIX_BEST.items())


def mix_train(config: TrainLmConfig, output_path: str) -> None:
    """Step function: a "training run" of a real training config whose val_loss is a known function
    of its mixture's weights (lowest at :data:`MIX_BEST`)."""
    weights = {str(spec.path): spec.weight for spec in config.data.datasets}
    fs.atomic_write(fs.join(output_path, "train_summary.json"), json.dumps({
        "final_loss": mix_loss(weights) + 0.1, "val_loss": mix_loss(weights), "steps": 3, "start_step": 0}))


class MixTrain(StepHandle, fn=mix_train):
    """A training config whose mixture is "trained" by :func:`mix_train`."""
