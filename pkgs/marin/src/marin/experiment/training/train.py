"""``train_lm()``: a lazy handle to a training step on levanter (JAX, Haiku, Optax, Grain, Orbax).

The step's config *is* levanter's :class:`~levanter.config.TrainLmConfig`: the datasets in it are
tokenize steps (or handles) until the runner resolves them to their output folders, and the
output folder is given to ``levanter.trainer.main`` at run time, never hashed.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levanter.config import TrainLmConfig
from levanter.initialize import CheckpointStart, HfCheckpoint, TrainedModel
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from marin.execution.core.encoding import flatten_config
from marin.execution.core.errors import InvalidStep
from marin.execution.core.identity import fn_identity, keep_identities
from marin.execution.core.lazy import Lazy, StepHandle, lower
from marin.execution.core.placeholders import OutputPath, output_path_of
from marin.execution.core.step import Step, output_name_of
from marin.execution.core.traits import EarlierBuilds, Start, StepTraits, step_function
from marin.execution.run.worker import current_step
from marin.execution.store.step_record import StepRecord
from marin.experiment.evaluation.eval import EvalConfig, Evaluate, eval_data
from marin.experiment.results import METRICS_FILE, TRAIN_SUMMARY_FILE
from marin.experiment.training.flops import SPEEDRUN_FILE, flops_accounting, speedrun_record
from marin.experiment.training.mixture import (
    mixture_notes,
    mixture_summary,
    parse_mixture,
    source_prefix_problem,
)
from marin.experiment.training.models import (
    FINAL,
    TrainedModelHandle,
    check_checkpoint_kept,
    final_only,
    training_config,
)
from marin.experiment.training.warm_start import extension_start, find_extension
from rigging import filesystem as fs

__all__ = [
    "FINAL",
    "TRAIN_SUMMARY_FILE",
    "TRAIN_TRAITS",
    "CheckpointRef",
    "TrainLm",
    "TrainLmConfig",
    "TrainedModelHandle",
    "check_checkpoint_kept",
    "checkpoint",
    "final_only",
    "train_lm",
    "train_lm_step",
    "training_config",
    "unigram_entropy",
]



@dataclass(frozen=True)
class CheckpointRef:
    """Checkpoint ``step`` of a training step, to start another run from (see :func:`checkpoint`)."""

    model: Any
    """The training step or handle."""
    step: int
    """Which of its checkpoints (the number of steps it had trained)."""

    def __post_init__(self) -> None:
        if not isinstance(self.step, int) or isinstance(self.step, bool) or self.step <= 0:
            raise ValueError(f"checkpoint step must be a positive int, got {self.step!r}")

    def start(self, reset_data_loader: bool = False) -> CheckpointStart:
        """levanter's ``CheckpointStart``, its paths placeholders for the training step's output."""
        return CheckpointStart(checkpoint_path=output_path_of(self.model, "checkpoints"), step=self.step,
                               reset_data_loader=reset_data_loader,
                               metrics_path=output_path_of(self.model, METRICS_FILE))


def _find_extension(config: TrainLmConfig, flat: Mapping[str, str], earlier: list, *, name: str, version: str) -> Any:
    return find_extension(name=name, version=version, fn=fn_identity(train_lm_step), config=config, flat=flat,
                          earlier=earlier, optimizer_from_json=lambda data: AdamConfig(**data))


def plan_start(step: Step, hashes: Mapping[int, str], earlier_builds: EarlierBuilds) -> Start | None:
    """For the plan: where a training build starts, when not from step 0 of its own.

    A start its config names (a branch, a fine-tune, Hugging Face weights) is only described; an
    extension of an earlier build is decided here, and the run hands it to :func:`train_lm_step`.
    """
    config = step.config
    start = config.trainer.initialize_from
    if isinstance(start, HfCheckpoint):
        return Start(f"starts from Hugging Face weights {start.repo}" + (f"@{start.revision}" if start.revision else ""))
    if isinstance(start, TrainedModel):  # from step 0 with a fresh optimizer: never an extension either
        source = start.path.step if isinstance(start.path, OutputPath) else start.path
        if isinstance(source, Lazy | Step):
            source = lower(source)
            return Start(f"fine-tunes the final parameters of {output_name_of(source.name, hashes[id(source)])} "
                         "(fresh optimizer)")
        return Start(f"fine-tunes the final parameters of {source} (fresh optimizer)")
    if start is not None:
        if isinstance(start.checkpoint_path, OutputPath):
            source = lower(start.checkpoint_path.step)
            return Start(f"starts from {output_name_of(source.name, hashes[id(source)])} at step {start.step}")
        return Start(f"starts from step {start.step} of {start.checkpoint_path}")
    earlier = [(StepRecord(path).files_folder(), prov, prov.config_flat or {})
               for path, prov in earlier_builds(step.name)]
    found = _find_extension(config, flatten_config(config, hashes), earlier, name=step.name, version=step.version)
    return found.planned() if found is not None else None


TRAIN_TRAITS = StepTraits(
    scale_fields=("trainer.num_train_steps", "trainer.batch_size", "trainer.seq_len"),
    volatile_files=(
        "config.json",  # the run's config: absolute dataset paths
        TRAIN_SUMMARY_FILE,  # what this step writes of main()'s result: paths, tokens/s, MFU
        SPEEDRUN_FILE,  # wall time, MFU
        METRICS_FILE,  # step times, tokens/s, MFU, input wait, wall time
        "tensorboard/*",  # event files named by time and host, holding the same timings
        "checkpoints/*/_CHECKPOINT_METADATA",  # Orbax: init and commit timestamps
        "checkpoints/*commit_success.txt",  # Orbax: the checkpoint's absolute path
        "checkpoints/*/state/manifest.ocdbt",  # OCDBT: lists its data files, which are named at random
        "checkpoints/*/state/d/*",  # OCDBT data files, named at random
        "checkpoints/*/state/ocdbt.process_*",  # the same, per process
        "wandb/*",  # W&B's run files (only with wandb=): a random run id and times, by construction
        "lora.json",  # a LoRA run's base: its absolute folder (only with lora=)
    ),
    plan_start=plan_start,
    plan_notes=mixture_notes,
    accelerator=True,
)
"""A training step (pretraining or fine-tuning, with its in-training evaluations) computes on the
accelerator. Its work is the tokens it trains on (estimates scale by it). Its volatile files
differ between two runs of the same config and data (found by training twice and comparing the
outputs' manifests) and are left out of its output digest; the trained parameters
(``final/params.npz``) and the checkpoints' metadata are bit-identical on CPU and stay in."""


@step_function(TRAIN_TRAITS)
def train_lm_step(config: TrainLmConfig, output_path: str) -> None:
    """Step function: train (resuming from the newest checkpoint in ``output_path``).

    An extension of an earlier build is what the plan decided (:func:`plan_start`), handed over
    by the runner (``current_step().start``): this function never looks for earlier builds.
    """
    # levanter's trainer imports JAX: only in the step's own process, never when planning.
    from levanter.trainer import main

    # The chat package imports zephyr's datasets: the step's process loads it, planning does not.
    from marin.experiment.chat.tokenize import TEMPLATE_FILE

    # Keep the tokenizer beside the model so `marin sample` can decode with the same vocabulary.
    # (and the chat template, for chat data, so `marin sample --chat` renders turns the same way).
    for name in ("tokenizer.json", TEMPLATE_FILE):
        first = fs.join(str(config.data.datasets[0].path), name)
        if fs.exists(first):
            fs.atomic_write(fs.join(output_path, name), fs.read_bytes(first))
    start = branched_at = config.trainer.initialize_from
    running = current_step()
    planned = running.start if running is not None else None
    if isinstance(start, CheckpointStart):
        print(f"starts from step {start.step} of {start.checkpoint_path}")
    if planned is not None:
        print(planned.note)
        if planned.extends is not None:
            if start is not None:
                raise InvalidStep(f"{running.name if running else 'train_lm'}: the plan extends {planned.extends}, "
                                  f"but the config already starts from {start!r}")
            config = dataclasses.replace(
                config, trainer=dataclasses.replace(config.trainer, initialize_from=extension_start(planned)))
    began = time.perf_counter()
    result = main(config, output_path)
    wall_s = time.perf_counter() - began
    returned = result.to_json()
    summary = {k: v for k, v in returned.items() if isinstance(v, int | float | str | type(None))}
    summary.update(flops_accounting(returned, seq_len=config.trainer.seq_len, batch_size=config.trainer.batch_size))
    start = config.trainer.initialize_from
    summary["started_from"] = str(start.checkpoint_path) if isinstance(start, CheckpointStart) else None
    summary["planned_start"] = planned.to_json() if planned is not None else None  # what `marin plan` said
    # A branch counts the steps it trained; a run from step 0 (or extending an earlier build of
    # itself, which drew the same batches) counts them all.
    first = branched_at.step if isinstance(branched_at, CheckpointStart) else 0
    summary.update(mixture_summary(config, steps=result.steps, first_step=first, data_offset=result.data_offset,
                                   prefix=running.prefix if running is not None else None))
    fs.atomic_write(fs.join(output_path, TRAIN_SUMMARY_FILE), json.dumps(summary, indent=2, default=str))
    import jax  # already loaded by the trainer; asked only for the kind of device it trained on

    record = speedrun_record(summary, wall_s=wall_s, device_kind=jax.devices()[0].device_kind,
                             device_count=result.devices or jax.device_count())
    fs.atomic_write(fs.join(output_path, SPEEDRUN_FILE), json.dumps(record, indent=2, default=str))
    print(f"trained {result.steps} steps: loss {result.final_loss}, validation loss {result.val_loss}")


@dataclass(frozen=True, eq=False)
class TrainLm(StepHandle, fn=train_lm_step):
    """Handle to a training step; its output holds checkpoints, final parameters, metrics, config."""

    evals: tuple[Any, ...] = ()
    """Eval datasets (``marin.experiment.evaluation.eval.EvalData``) scored on the final model by a companion step."""

    def companions(self) -> tuple[Lazy, ...]:
        """The eval step of ``evals`` (named ``evals/<this step's name>``), when there are any."""
        if not self.evals:
            return ()
        cached = self.__dict__.get("_companions")
        if cached is None:
            cached = (Evaluate(name=f"evals/{self.name}", config=EvalConfig(
                model=self, checkpoint=FINAL, datasets=self.evals, seq_len=self.config.trainer.seq_len)),)
            object.__setattr__(self, "_companions", cached)
        return cached


def train_lm(name: str, version: str, model: LlamaConfig, optimizer: AdamConfig,
             datasets: Mapping[Any, float] | Sequence[tuple[int, Mapping[Any, float]]], batch_size: int,
             seq_len: int, num_train_steps: int, *,
             evals: Any = None, resources: Any = None,
             initialize_from: CheckpointRef | HfCheckpoint | TrainedModel | None = None,
             reset_data_loader: bool = False, **settings: Any) -> TrainLm:
    """A language-model training step over a weighted mixture of tokenized datasets.

    Every setting is checked here, so a bad value fails now, naming its field, not after the
    step was planned and started.

    Args:
        name: the step's name (its output folder is ``<prefix>/<name>-<hash>``).
        version: bump to retrain when the training code changed in a way the config does not show.
        model: the Llama shape (vocabulary size comes from the data).
        optimizer: ``AdamConfig``.
        datasets: ``{tokenized handle: weight}``, or a mixture by phase: ``[(0, {a: 0.7, b: 0.3}),
            (2000, {a: 0.2, b: 0.8})]`` draws with each phase's weights from its step on (a
            dataset a phase leaves out has weight 0 there; see :mod:`~marin.experiment.training.mixture`).
        batch_size: sequences per optimizer step.
        seq_len: tokens per sequence.
        num_train_steps: optimizer steps to train.
        evals: held-out data to score the final model on, by an eval step built with it
            (``evals/<name>``): a list of tokenized handles or raw text sources (labelled by their
            step names or paths), or a mapping of label to either (see ``marin.experiment.evaluation.eval``).
        resources: an ``iris`` ResourceConfig saying where the step runs (never hashed).
        initialize_from: where training starts instead of a random init (levanter's
            ``TrainerConfig.initialize_from``): ``checkpoint(model, step=N)`` continues from that
            checkpoint of another training step (parameters, optimizer state and data position),
            e.g. a cooldown branch; ``checkpoint(model)`` (no step) fine-tunes from another step's
            final parameters with a fresh optimizer and step counter; ``hf_checkpoint("org/name")``
            (``marin.experiment.hf``) starts from Hugging Face weights. The source's identity (and
            ``N``) are part of this step's.
        reset_data_loader: with ``checkpoint(...)``, read the data from the start instead.
        **settings: any other field of levanter's ``TrainerConfig`` (``seed``, ``grad_accum``,
            ``compute_dtype``, ``eval_every``, ``eval_batches``, ``checkpoint``, ``log_every``,
            ``peak_flops_per_device``, ``run_id``, ``tags``, ``wandb``, ``remat``, ``attention``,
            ``loss_block``, ``offload_optimizer``, ``mesh``), of its ``DataConfig``
            (``vocab_from_data``, ``prefetch``, ``shard_cache_dir``), or ``z_loss_weight``.
            ``run_id``, ``tags``, ``wandb``, ``log_every``, ``prefetch``, ``shard_cache_dir``,
            ``peak_flops_per_device``, ``mesh`` and how the step is computed (``remat``,
            ``attention``, ``loss_block``, ``offload_optimizer``) do not change the step's hash.

    Raises:
        InvalidStep: a bad setting, naming the step and the field.
    """
    if initialize_from is not None:
        settings["initialize_from"] = _initialize_from(name, initialize_from, reset_data_loader)
    elif reset_data_loader:
        raise InvalidStep(f"train_lm {name!r}: reset_data_loader=True needs initialize_from=checkpoint(model, step=N)")
    try:
        branch = initialize_from if isinstance(initialize_from, CheckpointRef) else None
        specs, phases = parse_mixture(datasets, branch_step=branch.step if branch is not None else None)
        if branch is not None and not reset_data_loader:
            problem = source_prefix_problem(specs, training_config(branch.model).data.datasets)
            if problem:
                raise ValueError(problem)
        config = TrainLmConfig.from_settings(specs, model, optimizer, batch_size=batch_size,
                                             seq_len=seq_len, num_train_steps=num_train_steps, **settings)
        if phases:
            config = dataclasses.replace(config, data=dataclasses.replace(config.data, phases=phases))
        eval_sets = _eval_datasets(evals)
    except (ValueError, TypeError) as e:
        raise InvalidStep(f"train_lm {name!r}: {e}") from None
    return TrainLm(name=name, version=version, config=config, resources=resources, evals=eval_sets)


def _initialize_from(name: str, value: Any, reset_data_loader: bool) -> Any:
    """levanter's ``initialize_from`` for what ``train_lm`` was given (one case per kind of start)."""
    if isinstance(value, CheckpointRef):
        return value.start(reset_data_loader)
    if reset_data_loader:
        raise InvalidStep(f"train_lm {name!r}: reset_data_loader=True needs initialize_from=checkpoint(model, step=N), "
                          f"got {type(value).__name__}")
    return value  # levanter's TrainerConfig checks it is one of its kinds (hf_checkpoint(), checkpoint(model))


def _eval_datasets(evals: Any) -> tuple[Any, ...]:
    """``evals`` of ``train_lm`` as labelled eval datasets."""
    if evals is None:
        return ()
    if isinstance(evals, Mapping):
        return tuple(eval_data(label, data) for label, data in evals.items())
    if isinstance(evals, str) or not isinstance(evals, list | tuple):
        raise ValueError(f"evals must be a list of datasets or a mapping of label to dataset, got {evals!r}")
    items = []
    for data in evals:
        label = lower(data).name if isinstance(data, Lazy | Step) else str(data).rstrip("/").rsplit("/", 1)[-1]
        items.append(eval_data(label, data))
    return tuple(items)


def checkpoint(model: Any, step: int | None = None, *, ema: bool = False) -> Any:
    """A checkpoint of a training step, for ``train_lm(..., initialize_from=...)``.

    ``checkpoint(model, step=N)`` continues that run from its checkpoint ``N``: parameters,
    optimizer state, step counter and (unless ``reset_data_loader``) data position, as a cooldown
    branch does. ``checkpoint(model)`` names the run's final parameters for a fine-tune: it starts
    at step 0 with a fresh optimizer and schedule, its vocabulary grown to its data's (new special
    tokens of a chat template get new rows; the old rows stay as trained). Either way the new
    step's key holds ``model``'s hash (and ``N``). ``checkpoint(model, ema=True)`` fine-tunes from the
    run's average of its parameters (``ema=`` of its training) instead of its final parameters.

    Raises:
        ValueError: ``model`` is not a training step, or the run never writes or does not keep
            checkpoint ``step`` (keep it with ``CheckpointConfig(keep_every=...)``).
    """
    config = training_config(model)
    final_only(model, step)
    if ema and (step is not None or config.trainer.ema is None):
        raise ValueError(f"checkpoint(..., ema=True) names a run's final average: {lower(model).name} "
                         + ("trains without ema=" if config.trainer.ema is None else f"at step {step} (give no step)"))
    if step is None:
        return TrainedModel(path=model, ema=ema)
    check_checkpoint_kept(config, step)
    return CheckpointRef(model=model, step=step)


def unigram_entropy(tokenized_path: str, split: str = "validation") -> float:
    """Entropy (nats per token) of the unigram distribution of a split, end-of-document tokens included.

    The baseline a language model must beat: a model that ignores context can do no better.
    """
    import numpy as np

    from levanter.data.tokenized import open_split, read_index
    from zephyr.shards import decode_tokens

    index = read_index(tokenized_path)
    data = open_split(tokenized_path, split)
    counts = np.zeros(int(index["vocab_size"]), dtype=np.int64)
    for i in range(len(data.source)):
        np.add.at(counts, decode_tokens(data.source[i]), 1)
    counts[int(index["eos_id"])] += len(data.source)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


# Moved from train.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.train")
