"""The config of a language-model training run: one tree of frozen dataclasses.

Shaped as levanter's own ``train_lm`` nests it::

    TrainLmConfig
      data:      DataConfig     the tokenized mixture and how it is read
      model:     ModelConfig    the network's shape (a LlamaConfig, or another family's config)
      optimizer: AdamConfig     AdamW and its learning-rate schedule
      trainer:   TrainerConfig  the loop: steps, batch, precision, evaluation, checkpoints, logging
      z_loss_weight

Every setting is written once, here, and validated when its dataclass is made. Fields that do not
change the trained model (logging frequency, prefetch depth, local caches, a run's name and tags,
where metrics are sent) are ``unhashed_field``s, so a content-hashed step over this config is not
rebuilt when they change. Where the run writes is not part of the config: ``main(config,
output_path)`` is given it. Importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from levanter.checkpoint import CheckpointConfig
from levanter.data.spec import DatasetSpec, MixturePhase
from levanter.ema import EmaConfig, ema_config
from levanter.initialize import (
    CheckpointStart,
    InitializeFrom,
    initialize_from_dict,
    initialize_kinds,
    initialize_to_dict,
)
from levanter.lora import LoraConfig
from levanter.models.family import ModelConfig, model_config_from_dict, model_family
from levanter.models.impl import Attention, LossImpl, Remat
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from levanter.sharding import MeshConfig
from rigging.fields import added_field, unhashed_field
from rigging.names import did_you_mean

__all__ = [
    "ComputeDtype",
    "DataConfig",
    "TrainLmConfig",
    "TrainerConfig",
    "WandbConfig",
    "config_from_dict",
    "config_to_dict",
]

TRAINER_REVISION = 2
"""Bumped when the same config trains a different model (2: optax schedules, rates in the state)."""


def _check_int(config: Any, name: str, least: int = 1, optional: bool = False) -> None:  # int >= least (or None)
    value = getattr(config, name)
    if not (optional and value is None) and (not isinstance(value, int) or isinstance(value, bool) or value < least):
        kind = "a positive int" if least == 1 else f"an int >= {least}"
        raise ValueError(f"{name} must be {kind}{' or None' if optional else ''}, got {value!r}")


class ComputeDtype(enum.Enum):
    """Precision of activations and matmuls; parameters and optimizer state stay float32."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"

    @property
    def jnp(self) -> Any:
        """The JAX dtype."""
        import jax.numpy as jnp

        return jnp.float32 if self is ComputeDtype.FLOAT32 else jnp.bfloat16


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    """Send metrics to Weights & Biases too (``pip install levanter[wandb]``); TensorBoard is always written.

    The run is named by the trainer's ``run_id`` and tagged with its ``tags``; ``WANDB_*``
    environment variables (``WANDB_API_KEY``, ``WANDB_MODE=offline`` ...) apply as usual.
    """

    project: str = "marin"
    """W&B project."""
    entity: str | None = None
    """W&B team or user (None: the account's default)."""
    group: str | None = None
    """Group runs together in the W&B interface."""
    mode: str | None = None
    """'online', 'offline' or 'disabled' (None: ``WANDB_MODE``, else online)."""

    def __post_init__(self) -> None:
        if not isinstance(self.project, str) or not self.project:
            raise ValueError(f"wandb project must be a non-empty string, got {self.project!r}")
        if self.mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"wandb mode must be 'online', 'offline', 'disabled' or None, got {self.mode!r}")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The training mixture and how it is read."""

    datasets: tuple[DatasetSpec, ...]
    """Tokenized datasets (``index.json`` folders) and their mixture weights."""
    vocab_from_data: bool = True
    """Replace model.vocab_size by the tokenized data's vocabulary size."""
    prefetch: int = unhashed_field(default=4)
    """Batches prepared ahead by a background thread (does not change the result)."""
    shard_cache_dir: str | None = unhashed_field(default=None)
    """Local folder for copies of remote shards (default: a temp folder; does not change the result)."""
    phases: tuple[MixturePhase, ...] = added_field(default=())
    """Later phases of the mixture, by increasing ``start_step`` (> 0): from each one's start, its
    weights replace the datasets' own (which hold from step 0). Empty: one weighting throughout."""
    epochs_warning: float = unhashed_field(default=4.0)
    """``marin plan`` warns when the run would read a dataset more than this many times (does not
    change the result)."""

    def __post_init__(self) -> None:
        if isinstance(self.datasets, list):
            object.__setattr__(self, "datasets", tuple(self.datasets))
        if not isinstance(self.datasets, tuple) or not self.datasets:
            raise ValueError(f"datasets must name at least one dataset, got {self.datasets!r}")
        for spec in self.datasets:
            if not isinstance(spec, DatasetSpec):
                raise ValueError(f"datasets must hold DatasetSpec values, got {type(spec).__name__}")
        _check_int(self, "prefetch", least=0)
        self._check_weights()
        warn = self.epochs_warning
        if isinstance(warn, bool) or not isinstance(warn, int | float) or not math.isfinite(warn) or warn <= 0:
            raise ValueError(f"epochs_warning must be a finite number > 0, got {warn!r}")

    def _check_weights(self) -> None:
        if isinstance(self.phases, list):
            object.__setattr__(self, "phases", tuple(self.phases))
        if not isinstance(self.phases, tuple) or not all(isinstance(p, MixturePhase) for p in self.phases):
            raise ValueError(f"phases must be a tuple of MixturePhase values, got {self.phases!r}")
        if not sum(spec.weight for spec in self.datasets) > 0:
            raise ValueError(f"the datasets' weights must not all be 0, got {[s.weight for s in self.datasets]}")
        previous = 0
        for phase in self.phases:
            if len(phase.weights) != len(self.datasets):
                raise ValueError(f"the phase at step {phase.start_step} has {len(phase.weights)} weights for "
                                 f"{len(self.datasets)} datasets")
            if phase.start_step <= previous:
                raise ValueError(f"phases must start at increasing steps after step 0, got {phase.start_step} "
                                 f"after {previous}")
            previous = phase.start_step


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """The training loop: how long, how big, how precise, and what it records."""

    num_train_steps: int = 100
    """Optimizer steps."""
    batch_size: int = 8
    """Sequences per optimizer step (global, over all devices and accumulation steps)."""
    seq_len: int = 128
    """Tokens per sequence (each window holds seq_len + 1 tokens: inputs and shifted targets)."""
    seed: int = 0
    """Seeds parameter init and the data order."""
    grad_accum: int = 1
    """Micro-batches per step; batch_size must be divisible by grad_accum (and the micro-batch by the devices)."""
    compute_dtype: ComputeDtype = ComputeDtype.FLOAT32
    """float32 or bfloat16 activations (a ``ComputeDtype`` or its string value)."""
    eval_every: int = 50
    """Validation loss every this many steps and at the end (0: only at the end)."""
    eval_batches: int = 4
    """Validation batches per evaluation (0 disables validation)."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoint frequency and retention (resuming relies on them)."""
    log_every: int = unhashed_field(default=1)
    """Write metrics every this many steps (does not change the result)."""
    peak_flops_per_device: float | None = unhashed_field(default=None)
    """Peak FLOP/s for MFU; None: datasheet value for known accelerators, measured on CPU."""
    run_id: str | None = unhashed_field(default=None)
    """The run's name in metrics and trackers (None: the output folder's name)."""
    tags: tuple[str, ...] = unhashed_field(default=())
    """Labels recorded with the metrics and sent to trackers."""
    wandb: WandbConfig | None = unhashed_field(default=None)
    """Also log to Weights & Biases (None: TensorBoard and metrics.jsonl only)."""
    initialize_from: InitializeFrom | None = None
    """Start from these weights (``HfCheckpoint``, ``TrainedModel``) or from another run's checkpoint
    (``CheckpointStart``) instead of a random init; a resume from this run's own checkpoints ignores it."""
    mesh: MeshConfig = unhashed_field(default=MeshConfig())
    """Device mesh: data replicas x fsdp shards x tensor shards (default: data parallel over all devices).
    Not hashed: the same run resumes on a different slice shape (results agree to float rounding)."""
    eval_tasks: tuple[Any, ...] = added_field(default=())
    """Benchmark tasks run through the lm-evaluation-harness every ``eval_every`` steps and at the
    end (lm-eval task names or task YAML paths); their scores are logged as ``<task>.<metric>``."""
    eval_task_limit: int | float | None = added_field(default=None)
    """Documents per task at each of those evaluations: a count, or a share below 1.0 (None: all)."""
    eval_task_fewshot: int | None = added_field(default=None)
    """Few-shot examples per prompt of every task (None: each task's default)."""
    ema: EmaConfig | None = added_field(default=None)
    """Keep an exponential moving average of the parameters beside them (``levanter.ema``): an
    ``EmaConfig`` or its decay (None: none)."""
    remat: Remat = unhashed_field(default=Remat.AUTO)
    """What each layer keeps for the backward pass: ``auto`` (the least recomputation whose memory
    estimate fits the device), ``none``, ``save_dots``, ``save_attention`` or ``full`` (a ``Remat`` or
    its string value). Not hashed: it changes how, not what, is computed."""
    attention: Attention = unhashed_field(default=Attention.AUTO)
    """The attention kernel: ``auto`` (splash on a TPU, XLA elsewhere), ``xla`` or ``splash``. Not hashed."""
    loss_block: int | None = unhashed_field(default=None)
    """Sequence positions per block of the output softmax (None: chosen from the vocabulary and batch).
    Not hashed."""
    loss_impl: LossImpl = unhashed_field(default=LossImpl.AUTO)
    """The loss over the output head: ``auto`` (the Pallas kernels on one TPU device, the blockwise
    scan elsewhere), ``blockwise`` or ``pallas`` (a ``LossImpl`` or its string value). Not hashed."""
    grad_dtype: str = added_field(default="float32")
    """The gradients' dtype: ``"float32"``, or ``"bfloat16"`` (differentiated with respect to the
    parameters cast to bfloat16: half the memory, rounded gradients). Changes the numbers: hashed
    when set."""
    layer_unroll: int | None = unhashed_field(default=None)
    """Layers per iteration of the layer scan (``levanter.models.impl.Impl.unroll``); None: chosen for
    the device (``levanter.models.impl.resolve_unroll``: small stacks unrolled on a TPU). Not hashed."""
    offload_optimizer: bool = unhashed_field(default=False)
    """Keep the optimizer state in host memory between steps (``pinned_host``), brought to the device
    for the update: frees its device memory at the cost of two transfers a step. Not hashed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "remat", Remat.parse(self.remat))
        object.__setattr__(self, "attention", Attention.parse(self.attention))
        object.__setattr__(self, "loss_impl", LossImpl.parse(self.loss_impl))
        _check_int(self, "loss_block", optional=True)
        _check_int(self, "layer_unroll", optional=True)
        if self.grad_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"grad_dtype must be 'float32' or 'bfloat16', got {self.grad_dtype!r}")
        if not isinstance(self.offload_optimizer, bool):
            raise ValueError(f"offload_optimizer must be a bool, got {self.offload_optimizer!r}")
        if isinstance(self.compute_dtype, str):
            try:
                object.__setattr__(self, "compute_dtype", ComputeDtype(self.compute_dtype))
            except ValueError:
                raise ValueError(f"compute_dtype must be one of {[d.value for d in ComputeDtype]}, "
                                 f"got {self.compute_dtype!r}") from None
        for name in ("num_train_steps", "batch_size", "seq_len", "grad_accum", "log_every"):
            _check_int(self, name)
        for name in ("seed", "eval_every", "eval_batches"):
            _check_int(self, name, least=0)
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size must be divisible by grad_accum, got batch_size={self.batch_size} "
                             f"and grad_accum={self.grad_accum}")
        if not isinstance(self.checkpoint, CheckpointConfig):
            raise ValueError(f"checkpoint must be a CheckpointConfig, got {type(self.checkpoint).__name__}")
        if self.peak_flops_per_device is not None and not self.peak_flops_per_device > 0:
            raise ValueError(f"peak_flops_per_device must be > 0, got {self.peak_flops_per_device}")
        if self.run_id is not None and (not isinstance(self.run_id, str) or not self.run_id.strip()):
            raise ValueError(f"run_id must be a non-empty string or None, got {self.run_id!r}")
        if isinstance(self.tags, list):
            object.__setattr__(self, "tags", tuple(self.tags))
        if not isinstance(self.tags, tuple) or not all(isinstance(t, str) and t for t in self.tags):
            raise ValueError(f"tags must be a sequence of non-empty strings, got {self.tags!r}")
        if not isinstance(self.mesh, MeshConfig):
            raise ValueError(f"mesh must be a MeshConfig, got {type(self.mesh).__name__}")
        if isinstance(self.eval_tasks, list):
            object.__setattr__(self, "eval_tasks", tuple(self.eval_tasks))
        if not isinstance(self.eval_tasks, tuple) or not all(t is not None and t != "" for t in self.eval_tasks):
            raise ValueError(f"eval_tasks must be a sequence of task names or task YAML paths, got {self.eval_tasks!r}")
        if self.eval_task_limit is not None and (isinstance(self.eval_task_limit, bool)
                                                 or not isinstance(self.eval_task_limit, int | float)
                                                 or not self.eval_task_limit > 0):
            raise ValueError(f"eval_task_limit must be a positive count or share, got {self.eval_task_limit!r}")
        if self.eval_task_fewshot is not None and (not isinstance(self.eval_task_fewshot, int)
                                                   or isinstance(self.eval_task_fewshot, bool)
                                                   or self.eval_task_fewshot < 0):
            raise ValueError(f"eval_task_fewshot must be an int >= 0 or None, got {self.eval_task_fewshot!r}")
        object.__setattr__(self, "ema", ema_config(self.ema))
        if self.wandb is not None and not isinstance(self.wandb, WandbConfig):
            raise ValueError(f"wandb must be a WandbConfig or None, got {type(self.wandb).__name__}")
        if self.initialize_from is not None and not isinstance(self.initialize_from, InitializeFrom):
            raise ValueError(f"initialize_from must be one of {initialize_kinds()} or None, "
                             f"got {type(self.initialize_from).__name__}")


@dataclasses.dataclass(frozen=True)
class TrainLmConfig:
    """Everything one language-model training run needs (but where it writes)."""

    data: DataConfig
    """The tokenized mixture."""
    model: ModelConfig = LlamaConfig()
    """Model family and shape (a config class of ``levanter.models.family.MODEL_FAMILIES``); its
    vocab_size is replaced by the data's when ``data.vocab_from_data``."""
    optimizer: AdamConfig = AdamConfig()
    """Optimizer and learning-rate schedule."""
    trainer: TrainerConfig = TrainerConfig()
    """The training loop."""
    z_loss_weight: float = 0.0
    """Add ``weight * mean(logsumexp(logits)^2)`` to the loss (0 or None: off)."""
    lora: LoraConfig | None = added_field(default=None)
    """Train low-rank adapters of the starting weights instead of the weights (``levanter.lora``):
    only the adapters are trained and checkpointed. Needs ``trainer.initialize_from`` weights."""
    revision: int = dataclasses.field(default=TRAINER_REVISION, init=False)
    """The trainer's revision (``TRAINER_REVISION``): part of a step's identity, not a setting."""

    def __post_init__(self) -> None:
        for name, kind in (("data", DataConfig), ("optimizer", AdamConfig), ("trainer", TrainerConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        model_family(self.model)  # raises, naming the families, for anything else
        if self.z_loss_weight is None:
            object.__setattr__(self, "z_loss_weight", 0.0)
        weight = self.z_loss_weight
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"z_loss_weight must be a finite number >= 0 or None, got {weight!r}")
        object.__setattr__(self, "z_loss_weight", float(weight))
        self.optimizer.check(self.trainer.num_train_steps)
        start = self.trainer.initialize_from
        self._check_lora()
        if isinstance(start, CheckpointStart) and start.step >= self.trainer.num_train_steps:
            raise ValueError(f"initialize_from starts at step {start.step}, not before the end of training "
                             f"(num_train_steps={self.trainer.num_train_steps})")

    def _check_lora(self) -> None:
        if self.lora is None:
            return
        if not isinstance(self.lora, LoraConfig):
            raise ValueError(f"lora must be a LoraConfig or None, got {type(self.lora).__name__}")
        start = self.trainer.initialize_from
        if start is None or isinstance(start, CheckpointStart):
            raise ValueError("lora adapts trained weights: give initialize_from=checkpoint(model) or "
                             f"hf_checkpoint(...) (the base), got {type(start).__name__ if start else 'none'}")
        if self.trainer.ema is not None:  # ema(A) ema(B) is not the average of the adapted weights
            raise ValueError("ema with lora would average the factors A and B, not the weights the model computes "
                             "with (W + s A B): drop ema=, or train the weights without lora")
        self.lora.check(self.model.linear_shapes())

    @classmethod
    def from_settings(cls, datasets: tuple[DatasetSpec, ...], model: ModelConfig, optimizer: AdamConfig,
                      **settings: Any) -> TrainLmConfig:
        """Build the tree from flat keywords, each naming a field of one section (``batch_size=``,
        ``prefetch=``, ``z_loss_weight=`` ...).

        Raises:
            ValueError: a keyword names no field, or a value is bad (the message names the field).
        """
        sections: dict[str, dict[str, Any]] = {"data": {}, "trainer": {}, "top": {}}
        owners = _setting_owners()
        for key, value in settings.items():
            if key not in owners:
                close = did_you_mean(key, owners)
                raise ValueError(f"unknown training setting {key!r}" + (close or f"; settings are: {', '.join(sorted(owners))}"))
            sections[owners[key]][key] = value
        return cls(data=DataConfig(datasets=datasets, **sections["data"]), model=model, optimizer=optimizer,
                   trainer=TrainerConfig(**sections["trainer"]), **sections["top"])


def _setting_owners() -> dict[str, str]:
    """``{keyword: section}`` for :meth:`TrainLmConfig.from_settings` (every field name is unique)."""
    # The phases come with the datasets (``train_lm(datasets=[(step, {...}), ...])``), not as a setting.
    owners = {f.name: "data" for f in dataclasses.fields(DataConfig) if f.name not in ("datasets", "phases")}
    owners.update({f.name: "trainer" for f in dataclasses.fields(TrainerConfig)})
    owners.update({f.name: "top" for f in dataclasses.fields(TrainLmConfig)
                   if f.init and f.name not in ("data", "model", "optimizer", "trainer")})
    return owners


# --------------------------------------------------------------------------- (de)serialisation

def config_to_dict(config: TrainLmConfig) -> dict[str, Any]:
    """JSON-ready form of ``config`` (enums as their values; ``model_family`` names the model's class)."""
    def plain(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value
    out = plain(dataclasses.asdict(config))
    out["trainer"]["initialize_from"] = initialize_to_dict(config.trainer.initialize_from)
    out["model_family"] = model_family(config.model)
    return out


def config_from_dict(data: Mapping[str, Any]) -> TrainLmConfig:
    """Inverse of :func:`config_to_dict` (``revision`` is the trainer's own, not read back)."""
    d = dict(data["data"])
    t = dict(data["trainer"])
    d["datasets"] = tuple(DatasetSpec(**spec) for spec in d["datasets"])
    d["phases"] = tuple(MixturePhase(**phase) for phase in d.get("phases", ()))
    t["checkpoint"] = CheckpointConfig(**t["checkpoint"])
    t["tags"] = tuple(t.get("tags", ()))
    t["eval_tasks"] = tuple(t.get("eval_tasks", ()))
    t["wandb"] = WandbConfig(**t["wandb"]) if t.get("wandb") else None
    t["initialize_from"] = initialize_from_dict(t.get("initialize_from"))
    t["ema"] = EmaConfig(**t["ema"]) if t.get("ema") else None
    if "mesh" in t:
        t["mesh"] = MeshConfig(**t["mesh"])
    return TrainLmConfig(data=DataConfig(**d), model=model_config_from_dict(data["model"], data.get("model_family")),
                         optimizer=AdamConfig(**data["optimizer"]), trainer=TrainerConfig(**t),
                         z_loss_weight=data.get("z_loss_weight", 0.0),
                         lora=LoraConfig.from_json(data["lora"]) if data.get("lora") else None)
