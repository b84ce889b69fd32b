"""``merge_checkpoints()`` and ``merge_lora()``: models made by averaging or folding cached checkpoints.

A merge is a deterministic step over checkpoints already built: the same checkpoints and weights
give the same bytes (``levanter.merge``), so a merge whose inputs were rebuilt identically is cut
off like any step. Its output is laid out as a training run's final model (``config.json``,
``final/params.npz``, the tokenizer and chat template, ``train_summary.json``) plus ``merge.json``
saying what was merged: it is evaluated, sampled, exported and fine-tuned from like any model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from levanter.initialize import TrainedModel
from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import Lazy, lower
from marin.execution.core.step import Step
from marin.execution.core.traits import StepTraits, step_function
from marin.experiment.results import TRAIN_SUMMARY_FILE
from marin.experiment.training.models import (
    FINAL,
    TrainedModelHandle,
    check_checkpoint_kept,
    final_only,
    training_config,
)
from rigging import filesystem as fs

__all__ = ["MERGE_FILE", "MergeCheckpoints", "MergeCheckpointsConfig", "MergeSource", "kept_checkpoints",
           "merge_checkpoints", "merge_checkpoints_step", "merge_lora"]

MERGE_FILE = "merge.json"
_MODEL_FILES = ("config.json", "tokenizer.json", "chat_template.json")


@dataclass(frozen=True)
class MergeSource:
    """One checkpoint of a merge."""

    model: Any
    """The training step or handle."""
    checkpoint: int | str = FINAL
    """``"final"`` or the step of a kept checkpoint."""


@dataclass(frozen=True)
class MergeCheckpointsConfig:
    """Which checkpoints are averaged, with which weights."""

    sources: tuple[MergeSource, ...]
    weights: tuple[float, ...]
    """One per source, summing to 1."""
    ema: bool = False
    """Average the runs' averages of their parameters (``ema=`` of their training) instead."""


@step_function(StepTraits(volatile_files=("config.json", MERGE_FILE)))  # both name absolute folders
def merge_checkpoints_step(config: MergeCheckpointsConfig, output_path: str) -> None:
    """Step function: the weighted mean of the checkpoints, written as a model folder."""
    from levanter.merge import average_models
    from levanter.training.final import save_final_params

    sources = [(str(s.model), None if s.checkpoint == FINAL else int(s.checkpoint)) for s in config.sources]
    _model, params = average_models(sources, config.weights, ema=config.ema)
    first = sources[0][0]
    for name in _MODEL_FILES:
        if fs.exists(fs.join(first, name)):
            fs.atomic_write(fs.join(output_path, name), fs.read_bytes(fs.join(first, name)))
    save_final_params(output_path, params)
    merged = [{"model": path, "checkpoint": FINAL if step is None else step, "weight": w}
              for (path, step), w in zip(sources, config.weights, strict=True)]
    fs.atomic_write(fs.join(output_path, MERGE_FILE), json.dumps({"merged": merged, "ema": config.ema}, indent=2))
    steps = [s.checkpoint for s in config.sources if isinstance(s.checkpoint, int)]
    summary = {"merged_checkpoints": [s.checkpoint for s in config.sources], "weights": list(config.weights),
               "steps": max(steps) if steps else None}
    fs.atomic_write(fs.join(output_path, TRAIN_SUMMARY_FILE), json.dumps(summary, indent=2))
    shown = ", ".join(f"{p.rstrip('/').rsplit('/', 1)[-1]}@{FINAL if s is None else s} x{w:.3g}"
                      for (p, s), w in zip(sources, config.weights, strict=True))
    print(f"merged {len(sources)} checkpoints: {shown}")


class MergeCheckpoints(TrainedModelHandle, fn=merge_checkpoints_step):
    """Handle to a merge; a model for ``evaluate``, ``marin sample``, ``export_hf`` and ``checkpoint(...)``."""

    def training_config(self) -> Any:
        return training_config(self.config.sources[-1].model)


def kept_checkpoints(model: Any) -> list[int]:
    """The checkpoint steps the run ``model`` describes keeps when it has finished, oldest first."""
    config = training_config(model)
    total, ckpt = config.trainer.num_train_steps, config.trainer.checkpoint
    saves = sorted(set(range(ckpt.save_every, total + 1, ckpt.save_every)) | {total})
    return [s for s in saves if s == total or (ckpt.keep_every is not None and s % ckpt.keep_every == 0)
            or s in saves[-ckpt.keep_last:]]


def _name(model: Any) -> str:
    return lower(model).name if isinstance(model, Lazy | Step) else repr(model)


def _sources(model: Any, steps: Sequence[int] | None, last: int | None) -> list[MergeSource]:
    """The checkpoints ``merge_checkpoints`` was asked for (ValueError naming what is wrong)."""
    if isinstance(model, list | tuple):
        if steps is not None or last is not None:
            raise ValueError("steps= and last= choose checkpoints of one run; a list names its checkpoints itself")
        out = []
        for ref in model:
            if isinstance(ref, TrainedModel):  # checkpoint(model): its final parameters
                out.append(MergeSource(ref.path, FINAL))
            elif hasattr(ref, "model") and hasattr(ref, "step"):  # checkpoint(model, step=N)
                out.append(MergeSource(ref.model, ref.step))
            else:
                raise ValueError(f"a list of checkpoints holds checkpoint(model) or checkpoint(model, step=N), got {ref!r}")
        return out
    if (steps is None) == (last is None):
        raise ValueError("give steps=[...] or last=N (the run's last N kept checkpoints), exactly one of them")
    if last is not None:
        if not isinstance(last, int) or isinstance(last, bool) or last <= 0:
            raise ValueError(f"last must be a positive int, got {last!r}")
        kept = kept_checkpoints(model)
        if len(kept) < last:
            raise ValueError(f"last={last}, but {_name(model)} keeps {len(kept)} checkpoints ({kept}); keep more with "
                             "checkpoint=CheckpointConfig(keep_every=...)")
        steps = kept[-last:]
    assert steps is not None
    if isinstance(steps, str | int) or not steps:
        raise ValueError(f"steps must be a non-empty list of checkpoint steps, got {steps!r}")
    return [MergeSource(model, step) for step in steps]


def _check_source(source: MergeSource) -> MergeSource:
    """``source`` with a run's last checkpoint named ``"final"`` (the same parameters); ValueError if not kept."""
    final_only(source.model, source.checkpoint)
    if source.checkpoint == FINAL:
        return source
    config = training_config(source.model)
    check_checkpoint_kept(config, source.checkpoint)  # type: ignore[arg-type]
    return MergeSource(source.model, FINAL) if source.checkpoint == config.trainer.num_train_steps else source


def _check_shapes(sources: list[MergeSource]) -> None:
    first = training_config(sources[0].model).model
    for s in sources[1:]:
        other = training_config(s.model).model
        differ = [f"{k} {getattr(first, k)} != {getattr(other, k)}" for k in ("hidden_dim", "intermediate_dim",
                  "num_heads", "num_kv_heads", "num_layers", "tie_embeddings") if getattr(first, k) != getattr(other, k)]
        if type(first) is not type(other) or differ:
            raise ValueError(f"checkpoints from runs of different shapes: {_name(sources[0].model)} and "
                             f"{_name(s.model)} differ in {', '.join(differ) or 'model family'}")


def merge_checkpoints(name: str, model: Any, steps: Sequence[int] | None = None, *, last: int | None = None,
                      weights: Sequence[float] | None = None, ema: bool = False, version: str = "v1") -> MergeCheckpoints:
    """A model whose parameters are the weighted mean of cached checkpoints.

    Args:
        name: the step's name.
        model: a training run (``train_lm(...)``, ``dpo(...)``) whose checkpoints ``steps`` or ``last``
            choose; or a list of ``checkpoint(run, step=N)`` / ``checkpoint(run)`` of runs of one shape.
        steps: the checkpoint steps to average (each kept by the run).
        last: the run's last ``last`` kept checkpoints (e.g. over a constant-rate run's last stretch).
        weights: one per checkpoint, normalised (None: equal).
        ema: average the runs' averages of their parameters (``ema=`` of their training).

    Raises:
        InvalidStep: one line naming the handle and what is wrong: neither or both of ``steps`` and
            ``last``, a checkpoint the run does not keep, runs of different shapes, bad weights.
    """
    from levanter.merge import normalized_weights

    try:
        sources = [_check_source(s) for s in _sources(model, steps, last)]
        if len({(id(s.model), s.checkpoint) for s in sources}) != len(sources):
            raise ValueError(f"a checkpoint is named twice: {[s.checkpoint for s in sources]}")
        _check_shapes(sources)
        scale = normalized_weights(weights, len(sources))
        if ema and any(training_config(s.model).trainer.ema is None for s in sources):
            raise ValueError("ema=True, but a run it merges trains without ema=")
    except ValueError as e:
        raise InvalidStep(f"merge_checkpoints {name!r}: {e}") from None
    return MergeCheckpoints(name=name, config=MergeCheckpointsConfig(sources=tuple(sources), weights=scale, ema=ema),
                            version=version)


def merge_lora(name: str, model: Any, *, ema: bool = False, version: str = "v1") -> MergeCheckpoints:
    """A model of the LoRA run ``model``'s adapters folded into its base (``W + alpha/rank A B``): a
    model of whole weights, to export, sample or train further without the base beside it.

    Raises:
        InvalidStep: ``model`` does not train LoRA adapters.
    """
    try:
        config = training_config(model)
    except ValueError as e:
        raise InvalidStep(f"merge_lora {name!r}: model: {e}") from None
    if config.lora is None:
        raise InvalidStep(f"merge_lora {name!r}: {_name(model)} trains no LoRA adapters (lora=LoraConfig(...))")
    return merge_checkpoints(name, [TrainedModel(model)], ema=ema, version=version)
