"""``dpo()``: a lazy handle to a preference-training step on levanter (``levanter.dpo``).

The step's config is levanter's :class:`~levanter.dpo.config.DpoRunConfig`: a training config
over the preference pairs (model, optimizer, loop, checkpoints, LoRA, EMA), the loss and its beta,
and the reference log-probs step it compares with. Its output is a training run's (checkpoints,
``final/params.npz``, ``metrics.jsonl``, tokenizer and chat template) plus ``dpo.json``: the
handle is a model for ``evaluate``, ``marin sample``, ``export_hf``, ``merge_checkpoints`` and
``checkpoint(...)``, at its final parameters or any checkpoint it keeps.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from levanter.config import ComputeDtype, TrainLmConfig
from levanter.data.spec import DatasetSpec
from levanter.dpo.config import DpoConfig, DpoRunConfig
from levanter.initialize import TrainedModel
from levanter.lora import LoraConfig
from levanter.optim import AdamConfig
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import lower
from marin.execution.core.traits import step_function
from marin.experiment.posttrain.reference import ReferenceLogprobs, check_preference_data, reference_logprobs
from marin.experiment.results import TRAIN_SUMMARY_FILE, read_metrics
from marin.experiment.training.models import TrainedModelHandle, training_config
from marin.experiment.training.train import TRAIN_TRAITS
from rigging import filesystem as fs

__all__ = ["DEFAULT_DPO_OPTIMIZER", "DPO_TRAITS", "Dpo", "dpo", "dpo_step"]

DEFAULT_DPO_OPTIMIZER = AdamConfig(learning_rate=5e-6, weight_decay=0.0, warmup=0.1, schedule="linear",
                                   min_lr_ratio=0.0)
"""Preference training's usual optimizer: a small peak rate, a tenth of the run of warmup, a linear decay to 0."""

DPO_TRAITS = dataclasses.replace(
    TRAIN_TRAITS, scale_fields=tuple(f"train.{f}" for f in TRAIN_TRAITS.scale_fields),
    volatile_files=(*TRAIN_TRAITS.volatile_files, "dpo.json"),  # its reference's and data's absolute folders
    plan_start=None, plan_notes=None)
"""As a training step's: the same volatile files (and ``dpo.json``), its work the pairs it trains on."""

_SUMMARY_KEYS = ("val_loss", "val_reward_accuracy", "val_reward_margin", "val_chosen_reward", "val_rejected_reward")


@step_function(DPO_TRAITS)
def dpo_step(config: DpoRunConfig, output_path: str) -> None:
    """Step function: preference-train (resuming from the newest checkpoint in ``output_path``)."""
    from levanter.dpo.trainer import main

    data = str(config.train.data.datasets[0].path)
    for name in ("tokenizer.json", "chat_template.json"):  # sampled and exported with these
        if fs.exists(fs.join(data, name)):
            fs.atomic_write(fs.join(output_path, name), fs.read_bytes(fs.join(data, name)))
    result = main(config, output_path)
    returned = result.to_json()
    summary = {k: v for k, v in returned.items() if isinstance(v, int | float | str | type(None))}
    metrics = read_metrics(output_path)
    for key in _SUMMARY_KEYS:
        first, last = (metrics.series.get(key) or [None])[0] if metrics else None, metrics.last(key) if metrics else None
        summary[key] = last[1] if last else None
        summary[f"initial_{key}"] = first[1] if first else None
    fs.atomic_write(fs.join(output_path, TRAIN_SUMMARY_FILE), json.dumps(summary, indent=2, default=str))
    print(f"trained {result.steps} steps of {config.dpo.loss.value} (beta {config.dpo.beta}): loss {result.final_loss}, "
          f"held-out reward accuracy {summary['initial_val_reward_accuracy']} -> {summary['val_reward_accuracy']}")


class Dpo(TrainedModelHandle, fn=dpo_step):
    """Handle to a DPO step; a model like a training step's (final parameters and its checkpoints)."""

    keeps_checkpoints = True

    def training_config(self) -> TrainLmConfig:
        return self.config.train


def _reference(name: str, model: Any, data: Any, reference: Any, lora: LoraConfig | None, dtype: ComputeDtype) -> Any:
    """The reference log-probs step ``dpo`` compares with (None: a LoRA run's own base)."""
    if isinstance(reference, ReferenceLogprobs):
        if reference.config.data != data:
            raise InvalidStep(f"dpo {name!r}: reference {reference.name} scores {lower(reference.config.data).name}, "
                              f"not this run's data {lower(data).name}")
        if reference.config.compute_dtype is not dtype:
            raise InvalidStep(f"dpo {name!r}: reference {reference.name} scores in {reference.config.compute_dtype.value}, "
                              f"this run computes in {dtype.value}; give reference_logprobs(..., "
                              f"compute_dtype={dtype.value!r})")
        return reference
    if reference is None and lora is not None:
        return None
    ref_model = model if reference is None else reference
    try:
        training_config(ref_model)
    except ValueError:
        raise InvalidStep(f"dpo {name!r}: reference must be a reference_logprobs(...) handle, a trained model or None "
                          f"(the starting model), got {type(reference).__name__}") from None
    return reference_logprobs(f"{lower(data).name}/reference/{lower(ref_model).name}", ref_model, data,
                              compute_dtype=dtype)


def dpo(name: str, model: Any, data: Any, *, beta: float, loss: str = "sigmoid", reference: Any = None,
        label_smoothing: float = 0.0, lora: LoraConfig | None = None, ema: Any = None,
        optimizer: AdamConfig = DEFAULT_DPO_OPTIMIZER, batch_size: int = 8, num_train_steps: int = 100,
        seq_len: int | None = None, version: str = "v1", resources: Any = None, **settings: Any) -> Dpo:
    """A preference-training step: ``model`` trained on ``data``'s pairs with a preference loss.

    Args:
        name: the step's name.
        model: the policy's starting point: a trained model (the SFT run, or any model handle).
        data: a ``preference_chat(...)`` handle.
        beta: how far the policy may move from the reference (> 0).
        loss: ``"sigmoid"`` (DPO), ``"ipo"`` or ``"hinge"`` (SLiC) (``levanter.dpo.config.DpoLoss``).
        reference: a ``reference_logprobs(...)`` handle (shared by every run that names it), a
            trained model to score the reference with, or None: ``model`` itself, scored once by a
            ``reference_logprobs`` step every run from the same model and data shares (with
            ``lora``: the base, scored in the step, no step and no second copy of the weights).
        label_smoothing: ``"sigmoid"`` only: the share of pairs assumed mislabelled (robust DPO).
        lora: train LoRA adapters of ``model`` instead of all its weights.
        ema: keep an average of the parameters (a decay, or ``levanter.ema.EmaConfig``).
        optimizer: ``AdamConfig`` (default :data:`DEFAULT_DPO_OPTIMIZER`).
        batch_size: pairs per optimizer step.
        num_train_steps: optimizer steps.
        seq_len: tokens per side (default: the data's ``max_seq_len``).
        **settings: any other setting ``train_lm`` takes (``seed``, ``eval_every``, ``eval_batches``
            (held-out batches scored), ``checkpoint``, ``grad_accum``, ``compute_dtype``, ``mesh`` ...).

    Raises:
        InvalidStep: a bad argument, naming the handle and the argument (``beta`` <= 0, an unknown
            loss, a LoRA rank larger than a weight, data that is not preference pairs ...).
    """
    check_preference_data("dpo", name, data)
    try:
        start_config = training_config(model)
    except ValueError as e:
        raise InvalidStep(f"dpo {name!r}: model: {e}") from None
    try:
        dtype = ComputeDtype(settings.get("compute_dtype", ComputeDtype.FLOAT32))
    except ValueError:
        raise InvalidStep(f"dpo {name!r}: compute_dtype must be one of {[d.value for d in ComputeDtype]}, "
                          f"got {settings['compute_dtype']!r}") from None
    ref = _reference(name, model, data, reference, lora, dtype)
    try:
        loss_config = DpoConfig(beta=beta, loss=loss, label_smoothing=label_smoothing)
        train = TrainLmConfig.from_settings(
            (DatasetSpec(path=data),), start_config.model, optimizer, batch_size=batch_size,
            seq_len=seq_len if seq_len is not None else data.config.max_seq_len, num_train_steps=num_train_steps,
            initialize_from=TrainedModel(model), lora=lora, ema=ema, **settings)
        config = DpoRunConfig(train=train, dpo=loss_config, reference=ref)
    except (ValueError, TypeError) as e:
        raise InvalidStep(f"dpo {name!r}: {e}") from None
    return Dpo(name=name, config=config, version=version, resources=resources)
