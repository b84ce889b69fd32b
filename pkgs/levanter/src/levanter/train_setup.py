"""Everything a training run needs before its first step, made from one :class:`TrainLmConfig`.

:func:`set_up` turns the config into a :class:`TrainSetup`: the mesh and how batches are split over
it (:class:`BatchLayout`), the model and optimizer, the compiled step, the checkpoint manager and
the state restored from it, validation, the input iterator and the metrics and progress writers.
``levanter.trainer.main`` then runs the loop over it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from levanter.checkpoint import Checkpointer, checkpoint_dir
from levanter.config import TrainerConfig, TrainLmConfig, config_to_dict
from levanter.data import check_mixture_data, data_is_chat, data_vocab_size, eval_batches, train_dataset
from levanter.data.usage import starting_data_state
from levanter.flops import CONFIG_SOURCE, PeakFlops, peak_flops
from levanter.initialize import initialize_to_dict
from levanter.lora import write_lora_file
from levanter.memory import MEMORY_FILE, MemoryReport, measure_memory
from levanter.metrics import MetricsWriter
from levanter.models.family import RUN_CONFIG_FILE
from levanter.sharding import activation_sharder, batch_spec, make_mesh, process_rows
from levanter.training import (
    Progress,
    Start,
    Validation,
    loss_fn,
)
from levanter.training.execution import Execution, compile_step, plan_execution, step_flops
from levanter.training.step import lm_objective
from levanter.training.trained import Trained, trained_state
from rigging import filesystem as fs
from rigging.progress import ProgressWriter

__all__ = ["BatchLayout", "RunParts", "TrainSetup", "batch_layout", "build_run", "resolve_model", "run_peak", "run_writers",
           "set_up", "write_lora"]

logger = logging.getLogger(__name__)

_RATE = jax.ShapeDtypeStruct((), jnp.float32)
"""The learning rate argument of the compiled step (a float32 scalar)."""


def resolve_model(config: TrainLmConfig) -> Any:
    """The model ``config`` trains: its ``model`` with the data's vocabulary (``vocab_from_data``) and
    a context at least the training ``seq_len``."""
    model = config.model
    if config.data.vocab_from_data:
        vocab = data_vocab_size(config.data.datasets)
        if vocab != model.vocab_size:
            logger.info("model vocab_size %d replaced by the data's %d", model.vocab_size, vocab)
            model = dataclasses.replace(model, vocab_size=vocab)
    seq_len = config.trainer.seq_len
    if seq_len > model.max_seq_len:
        # RoPE has no position table, so a longer context only changes the recorded limit.
        logger.warning("seq_len %d exceeds model max_seq_len %d; extending max_seq_len", seq_len, model.max_seq_len)
        model = dataclasses.replace(model, max_seq_len=seq_len)
    return model


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """The mesh, and how each global batch is split over it and over the processes."""

    mesh: Any
    devices: list[Any]
    """Every device of the mesh, of every process."""
    replicated: NamedSharding
    batch_sharding: NamedSharding
    rows: slice
    """The rows of each global batch this process feeds (the global batch is assembled by JAX)."""
    primary: bool
    """Whether this is process 0, the one that writes the run's files."""


def batch_layout(trainer: TrainerConfig) -> BatchLayout:
    """The layout of ``trainer.mesh``, checked against the micro-batch it must split."""
    mesh = make_mesh(trainer.mesh)
    batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    micro = trainer.batch_size // trainer.grad_accum
    if micro % batch_shards:
        raise ValueError(f"batch_size / grad_accum = {micro} must be divisible by the {batch_shards} batch shards "
                         f"(data x fsdp) of mesh {dict(mesh.shape)}")
    batch_sharding = NamedSharding(mesh, P(*batch_spec()))
    return BatchLayout(mesh=mesh, devices=mesh.devices.flatten().tolist(), replicated=NamedSharding(mesh, P()),
                       batch_sharding=batch_sharding, rows=process_rows(batch_sharding, trainer.batch_size),
                       primary=jax.process_index() == 0)


class _NullWriter:
    """The metrics sink of processes other than 0 (one process writes the run's files)."""

    def write(self, step: int, values: dict[str, Any]) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class TrainSetup:
    """A run ready for its first step. :meth:`close` releases the iterator, writers and checkpointer."""

    config: TrainLmConfig
    """The run's config, its model resolved (:func:`resolve_model`)."""
    output_path: str
    run_id: str
    layout: BatchLayout
    train_step: Any
    """``(state, batch, rate) -> (state, metrics)``, compiled once for the state and batch placement."""
    rate_of_step: Callable[[int], Any]
    """The learning rate of the (0-based) step, the compiled step's third argument."""
    eval_loss: Callable[[Any, jax.Array], jax.Array]
    """``(params, batch) -> loss``, jitted."""
    place: Callable[[np.ndarray], jax.Array]
    """This process's rows of a batch -> the global batch array."""
    checkpointer: Checkpointer
    start: Start
    memory: MemoryReport
    validation: Validation
    has_validation_data: bool
    peak: PeakFlops
    started_at: float
    """``time.perf_counter()`` when the run began (before restoring and compiling)."""
    iterator: Any
    """The training batches (a Grain iterator, positioned where ``start`` left off)."""
    writer: Any
    """The metrics sink (``MetricsWriter`` on process 0)."""
    progress: Progress | None
    """The progress listener (process 0 only)."""
    count_step_flops: Callable[[], float | None] = lambda: None
    """FLOPs of one step as XLA counts them (``levanter.training.execution.step_flops``), on demand."""
    data_offset: int = 0
    """Step ``t``'s batch is elements ``[t * batch_size + data_offset, ...)`` of the mixture's stream
    (``levanter.data.usage``)."""
    sequences_per_example: int = 1
    """Sequences of ``seq_len`` each batch row holds (a preference pair: 2)."""

    @property
    def tokens_per_step(self) -> int:
        return self.config.trainer.batch_size * self.config.trainer.seq_len * self.sequences_per_example

    @property
    def flops_per_token(self) -> float:
        return self.config.model.flops_per_token(self.config.trainer.seq_len)

    @property
    def causal_flops_per_token(self) -> float:
        """:attr:`flops_per_token` with the attention products halved for the causal mask."""
        return self.config.model.flops_per_token(self.config.trainer.seq_len, causal=True)

    def close(self) -> None:
        self.iterator.close()
        self.writer.close()
        self.checkpointer.close()
        if self.progress is not None:
            self.progress.close()


def set_up(config: TrainLmConfig, output_path: str) -> TrainSetup:
    """Build, compile and restore everything ``config`` trains with, writing ``memory.json`` and
    ``config.json`` into ``output_path`` (process 0).

    Raises:
        ValueError: a dataset of the mixture is missing or incomplete (before anything is built).
    """
    check_mixture_data(config.data.datasets)
    run = build_run(config, output_path)
    config, layout, model, trained, checkpointer = run.config, run.layout, run.model, run.trained, run.checkpointer
    model_config, trainer, execution = config.model, config.trainer, run.execution
    dtype = trainer.compute_dtype.jnp
    target, start = trained.target, trained.start
    state_shardings = jax.tree.map(lambda s: s.sharding, target)

    batch_shape = _batch_shape(config, layout)
    objective = None if config.lora is None else lm_objective(
        model, dtype, config.z_loss_weight, loss_block=trainer.loss_block, params_of=trained.model_params)
    train_step = compile_step(model, config, layout, target, batch_shape, _RATE, objective=objective, trained=trained)
    memory = measure_memory(layout.mesh, start.state.params, start.state.opt_state, train_step,
                            execution=execution)
    logger.info("%s", memory.summary())
    if layout.primary:
        fs.atomic_write(fs.join(output_path, MEMORY_FILE), memory.dumps())

    place = _placer(layout.batch_sharding, batch_shape.shape)
    eval_loss = trained.jit(lambda params, batch, frozen: loss_fn(model, trained.model_params(params, frozen), batch,
                                                                  dtype, block=trainer.loss_block),
                            in_shardings=(state_shardings.params, layout.batch_sharding), out_shardings=layout.replicated)
    val_batches = _validation_batches(config)
    validation = Validation(eval_loss, [b[layout.rows] for b in val_batches], place)
    peak = run_peak(trainer, layout)
    run_id = trainer.run_id or os.path.basename(output_path.rstrip("/"))
    writer, progress = run_writers(config, output_path, run_id, start, layout.primary)
    if layout.primary:
        write_lora(config, output_path)
    iterator, data_offset = _train_batches(config, layout, start)
    return TrainSetup(config=config, output_path=output_path, run_id=run_id, layout=layout, train_step=train_step,
                      rate_of_step=run.rate_of_step,
                      eval_loss=eval_loss, place=place, checkpointer=checkpointer, start=start, memory=memory,
                      validation=validation, has_validation_data=bool(val_batches), peak=peak,
                      started_at=run.started_at,
                      iterator=iterator, writer=writer, progress=progress, data_offset=data_offset,
                      # XLA's count is of a plain language-model step: a LoRA run's step is another program.
                      count_step_flops=(lambda: None) if config.lora is not None else
                      lambda: step_flops(model_config, config, execution.impl, target, batch_shape, _RATE))


@dataclasses.dataclass(frozen=True)
class RunParts:
    """What every training run (a language model's, a DPO run's) builds before its step."""

    config: TrainLmConfig
    """The run's config, its model resolved (:func:`resolve_model`)."""
    layout: BatchLayout
    execution: Execution
    """Its remat policy and attention kernel (``levanter.training.execution.plan_execution``)."""
    model: Any
    """The model in the compute dtype, its activations sharded on the mesh."""
    rate_of_step: Callable[[int], float]
    started_at: float
    """When the run's set-up began (after the model was built): its time to first step counts from here."""
    checkpointer: Checkpointer
    trained: Trained
    """Its target and starting state (``levanter.training.trained``)."""


def build_run(config: TrainLmConfig, output_path: str) -> RunParts:
    """The model, mesh, execution plan, checkpointer and starting state of run ``config``."""
    model_config = resolve_model(config)
    config = dataclasses.replace(config, model=model_config)
    trainer = config.trainer
    layout = batch_layout(trainer)
    execution = plan_execution(config, model_config, layout.mesh, jax.local_devices()[0])
    model = model_config.build(trainer.compute_dtype.jnp,
                               shard=activation_sharder(layout.mesh, model_config.sharding_units()),
                               impl=execution.impl)
    # The schedule stays out of every compiled program: the state is made with the rate at 0 (each
    # step sets it) and the step takes its rate as an argument, so runs of one model that differ in
    # schedule, peak or length share their compiled init and step (JAX's compilation cache).
    rate_of_step = config.optimizer.rate_of_step(trainer.num_train_steps)  # checks the schedule fits
    tx = config.optimizer.at_rate(0.0)
    started_at = time.perf_counter()
    checkpointer = Checkpointer(checkpoint_dir(output_path), trainer.checkpoint)
    # All the parameters, or LoRA adapters of frozen weights (levanter.training.trained).
    trained = trained_state(config, model_config, tx, layout.mesh, checkpointer)
    return RunParts(config=config, layout=layout, execution=execution, model=model, rate_of_step=rate_of_step,
                    started_at=started_at, checkpointer=checkpointer, trained=trained)


def run_peak(trainer: TrainerConfig, layout: BatchLayout) -> PeakFlops:
    """The peak FLOP/s the run's MFU is counted against: the config's, else its device's."""
    if trainer.peak_flops_per_device:
        return PeakFlops(trainer.peak_flops_per_device, CONFIG_SOURCE)
    return peak_flops(trainer.compute_dtype.jnp, layout.devices[0])


def write_lora(config: TrainLmConfig, output_path: str) -> None:
    """For a LoRA run, the adapters' file (its parameters are adapters of ``initialize_from``'s base)."""
    if config.lora is not None:
        write_lora_file(output_path, config.lora, initialize_to_dict(config.trainer.initialize_from) or {})


def _batch_shape(config: TrainLmConfig, layout: BatchLayout) -> jax.ShapeDtypeStruct:
    """The global batch the step takes."""
    trainer = config.trainer
    # Chat data comes as [3, seq_len + 1] windows (ids, loss mask, segment ids; levanter.data.chat).
    window = (3, trainer.seq_len + 1) if data_is_chat(config.data.datasets) else (trainer.seq_len + 1,)
    return jax.ShapeDtypeStruct((trainer.batch_size, *window), jnp.int32, sharding=layout.batch_sharding)


def _placer(sharding: NamedSharding, shape: tuple[int, ...]) -> Callable[[np.ndarray], jax.Array]:
    def place(local: np.ndarray) -> jax.Array:
        """The global batch array, assembled from the rows this process holds."""
        return jax.make_array_from_process_local_data(sharding, local, shape)

    return place


def _validation_batches(config: TrainLmConfig) -> list[np.ndarray]:
    """The validation batches (global), none when ``eval_batches`` is 0 or the split cannot fill one."""
    trainer, data = config.trainer, config.data
    if not trainer.eval_batches:
        return []
    batches = eval_batches(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                           max_batches=trainer.eval_batches, cache_dir=data.shard_cache_dir)
    if not batches:
        logger.warning("no validation loss: the validation split cannot fill one batch of %d x %d tokens",
                       trainer.batch_size, trainer.seq_len + 1)
    return list(batches)


def run_writers(config: TrainLmConfig, output_path: str, run_id: str, start: Start,
                primary: bool) -> tuple[Any, Progress | None]:
    """The metrics sink and progress listener; on process 0 they (and ``config.json``) write into ``output_path``."""
    trainer = config.trainer
    if not primary:
        return _NullWriter(), None
    config_json = config_to_dict(config)
    fs.atomic_write(fs.join(output_path, RUN_CONFIG_FILE), json.dumps(config_json, indent=2))
    earlier_rows = str(start.source.metrics_path) if start.source is not None and start.source.metrics_path else None
    writer = MetricsWriter(output_path, resume_step=start.step, run_id=run_id, tags=trainer.tags,
                           wandb=trainer.wandb, run_config=config_json, earlier_rows=earlier_rows)
    progress = Progress(ProgressWriter(output_path, total=trainer.num_train_steps, unit="step"),
                        _progress_bar(trainer.num_train_steps, start.step))
    return writer, progress


def _progress_bar(total: int, initial: int) -> Any:
    """A tqdm bar on a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm  # deferred: only a terminal shows a bar

    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


def _train_batches(config: TrainLmConfig, layout: BatchLayout, start: Start) -> tuple[Any, int]:
    """This process's rows of the training batches, from where ``start`` left off (a Grain iterator:
    its ``get_state`` is what a checkpoint saves), and the stream's offset (``TrainSetup.data_offset``)."""
    trainer, data = config.trainer, config.data
    iterator = iter(train_dataset(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                                  seed=trainer.seed, prefetch=data.prefetch, cache_dir=data.shard_cache_dir,
                                  rows=layout.rows, phases=data.phases))
    fresh = iterator.get_state()
    state = starting_data_state(fresh, start.data_state, step=start.step, batch_size=trainer.batch_size,
                                phased=bool(data.phases), branch=start.source is not None)
    if state is not None:
        iterator.set_state(state)
    count = int((state or fresh)["count"])
    return iterator, count - start.step * trainer.batch_size
