"""Training a language model on tokenized data: ``main(config, output_path)`` over one :class:`TrainLmConfig`.

Run from a shell with ``python -m levanter.trainer CONFIG.json OUTPUT_PATH``; a run stopped by
SIGTERM saves a checkpoint and exits with :data:`PREEMPTED_EXIT_CODE` (75), and running it again
resumes. ``main`` puts together the parts in :mod:`levanter.training` (state, step, loop, hooks) for
the model the config describes (any :class:`~levanter.models.family.ModelConfig`). The config
classes live in :mod:`levanter.config` (no JAX import) and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from fray.types import PREEMPTED_EXIT_CODE
from levanter.checkpoint import Checkpointer, checkpoint_dir
from levanter.config import (
    ComputeDtype,
    DataConfig,
    TrainerConfig,
    TrainLmConfig,
    WandbConfig,
    config_from_dict,
    config_to_dict,
)
from levanter.data import data_is_chat, data_vocab_size, eval_batches, train_dataset
from levanter.eval import read_tokenizer_json
from levanter.flops import CONFIG_SOURCE, FlopsSummary, PeakFlops, compiled_step_flops, peak_flops
from levanter.memory import MEMORY_FILE, measure_memory
from levanter.metrics import MetricsWriter
from levanter.sharding import activation_sharder, batch_spec, make_mesh, process_rows
from levanter.training import (
    Checkpointing,
    Hook,
    NonFiniteLossError,
    Progress,
    ScheduledHook,
    StepInfo,
    Throughput,
    Trainer,
    TrainingPreempted,
    TrainState,
    Validation,
    abstract_state,
    loss_fn,
    make_train_step,
    starting_state,
)
from levanter.training.final import save_final_params
from rigging import filesystem as fs
from rigging.progress import ProgressWriter

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "ComputeDtype",
    "DataConfig",
    "NonFiniteLossError",
    "ScheduledHook",
    "StepInfo",
    "TrainLmConfig",
    "TrainState",
    "TrainerConfig",
    "TrainingPreempted",
    "WandbConfig",
    "abstract_state",
    "checkpoint_dir",
    "config_from_dict",
    "config_to_dict",
    "loss_fn",
    "main",
    "make_train_step",
    "resolve_model",
]

logger = logging.getLogger(__name__)


def _join_distributed() -> None:
    """Join the multi-host JAX job this process was launched into (``iris.multihost``), once."""
    from iris.multihost import initialize_jax  # deferred: only runs launched by iris have a job to join

    if not jax.distributed.is_initialized():
        initialize_jax()


class _NullWriter:
    """The metrics sink of processes other than 0 (one process writes the run's files)."""

    def write(self, step: int, values: dict[str, Any]) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


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


def _task_eval(config: TrainLmConfig, model_config: Any, mesh: Any) -> Hook:
    """The hook of ``trainer.eval_tasks``: the harness on the current parameters, with the data's tokenizer."""
    # lm_eval (and the datasets library under it) takes seconds to import: only for runs with tasks.
    from levanter.eval_harness.config import HarnessConfig
    from levanter.eval_harness.hook import task_eval_hook

    trainer = config.trainer
    harness = HarnessConfig(batch_size=trainer.batch_size, seq_len=trainer.seq_len, compute_dtype=trainer.compute_dtype)
    return task_eval_hook(model_config, read_tokenizer_json(str(config.data.datasets[0].path)), trainer.eval_tasks,
                          harness=harness, num_fewshot=trainer.eval_task_fewshot, limit=trainer.eval_task_limit,
                          mesh=mesh)


def main(config: TrainLmConfig, output_path: str, *, hooks: Sequence[ScheduledHook] = ()) -> dict[str, Any]:
    """Train (or resume training) as ``config`` says, writing into ``output_path``; return a summary.

    ``output_path`` (local or gs://) receives ``config.json``, ``metrics.jsonl``, TensorBoard
    events, ``memory.json``, checkpoints (:func:`checkpoint_dir`) and ``final/params.npz``.
    ``hooks`` run in the loop after the trainer's own (validation, checkpoints); what they return is
    logged at their step (:mod:`levanter.training.hooks`).

    Returns:
        ``final_loss``, ``val_loss`` (None without validation data), ``steps``, ``start_step`` (> 0
        after a resume), the paths (``output_path``, ``checkpoint_path``, ``params_path``,
        ``config_path``, ``metrics_path``), ``model`` (its config as a dict), ``tokens_per_s`` (of the
        last step), ``checkpoint_blocked_s``, ``devices``, ``mesh``, ``processes``, ``memory``,
        ``run_id``, and the FLOPs accounting of :class:`~levanter.flops.FlopsSummary`:
        ``num_params``, ``flops_per_token``, ``tokens_trained``, ``model_flops``, ``hardware_flops``,
        ``mfu`` and ``hfu`` (this attempt's steps over its training time), ``peak_flops_per_device``
        and ``peak_flops_source``.

    Raises:
        TrainingPreempted: SIGTERM arrived; a checkpoint was committed first.
        NonFiniteLossError: the loss became NaN or infinite.
    """
    if not output_path:
        raise ValueError(f"output_path must be non-empty, got {output_path!r}")
    _join_distributed()
    model_config = resolve_model(config)
    config = dataclasses.replace(config, model=model_config)
    trainer, data = config.trainer, config.data
    run_id = trainer.run_id or os.path.basename(output_path.rstrip("/"))
    mesh = make_mesh(trainer.mesh)
    devices = mesh.devices.flatten().tolist()
    n_dev = len(devices)
    batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    micro = trainer.batch_size // trainer.grad_accum
    if micro % batch_shards:
        raise ValueError(f"batch_size / grad_accum = {micro} must be divisible by the {batch_shards} batch shards "
                         f"(data x fsdp) of mesh {dict(mesh.shape)}")
    replicated = NamedSharding(mesh, P())
    batch_sharding = NamedSharding(mesh, P(*batch_spec()))
    # Each process feeds only the rows its devices hold; the global batch is assembled by JAX.
    rows = process_rows(batch_sharding, trainer.batch_size)
    primary = jax.process_index() == 0
    dtype = trainer.compute_dtype.jnp

    model = model_config.build(dtype, shard=activation_sharder(mesh, model_config.sharding_units()))
    tx = config.optimizer.build(trainer.num_train_steps)

    start_wall = time.perf_counter()
    target = abstract_state(model_config, tx, trainer.seq_len, mesh)
    state_shardings = jax.tree.map(lambda s: s.sharding, target)
    checkpoints = checkpoint_dir(output_path)
    checkpointer = Checkpointer(checkpoints, trainer.checkpoint)
    start = starting_state(checkpointer, target, model_config, tx, seq_len=trainer.seq_len, seed=trainer.seed,
                           initialize_from=trainer.initialize_from)

    # Chat data comes as [3, seq_len + 1] windows (ids, loss mask, segment ids; levanter.data.chat).
    window = (3, trainer.seq_len + 1) if data_is_chat(data.datasets) else (trainer.seq_len + 1,)
    batch_shape = jax.ShapeDtypeStruct((trainer.batch_size, *window), jnp.int32, sharding=batch_sharding)
    # Compiled ahead of time, once: a batch or state placed differently is an error, not a recompile.
    # The old state is donated, so parameters and optimizer state are held once, not twice, per step.
    train_step = jax.jit(make_train_step(model, tx, dtype, trainer.grad_accum, batch_sharding,
                                         z_loss_weight=config.z_loss_weight),
                         in_shardings=(state_shardings, batch_sharding), out_shardings=(state_shardings, replicated),
                         donate_argnums=0).lower(target, batch_shape).compile()
    memory = measure_memory(mesh, start.state.params, start.state.opt_state, train_step)
    logger.info("%s", memory.summary())
    if primary:
        fs.atomic_write(fs.join(output_path, MEMORY_FILE), memory.dumps())

    def place(local: np.ndarray) -> jax.Array:
        """The global batch array, assembled from the rows this process holds."""
        return jax.make_array_from_process_local_data(batch_sharding, local, batch_shape.shape)

    eval_loss = jax.jit(lambda params, batch: loss_fn(model, params, batch, dtype),
                        in_shardings=(state_shardings.params, batch_sharding), out_shardings=replicated)
    val_batches = (eval_batches(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                                max_batches=trainer.eval_batches, cache_dir=data.shard_cache_dir)
                   if trainer.eval_batches else [])
    if trainer.eval_batches and not val_batches:
        logger.warning("no validation loss: the validation split cannot fill one batch of %d x %d tokens",
                       trainer.batch_size, trainer.seq_len + 1)
    validation = Validation(eval_loss, [b[rows] for b in val_batches], place)

    peak = (PeakFlops(trainer.peak_flops_per_device, CONFIG_SOURCE) if trainer.peak_flops_per_device
            else peak_flops(dtype, devices[0]))
    tokens_per_step = trainer.batch_size * trainer.seq_len
    flops_per_token = model_config.flops_per_token(trainer.seq_len)

    config_json = config_to_dict(config)
    if primary:
        fs.atomic_write(fs.join(output_path, "config.json"), json.dumps(config_json, indent=2))
    earlier_rows = str(start.source.metrics_path) if start.source is not None and start.source.metrics_path else None
    writer = (MetricsWriter(output_path, resume_step=start.step, run_id=run_id, tags=trainer.tags,
                            wandb=trainer.wandb, run_config=config_json, earlier_rows=earlier_rows)
              if primary else _NullWriter())
    progress = Progress(ProgressWriter(output_path, total=trainer.num_train_steps, unit="step"),
                        _progress_bar(trainer.num_train_steps, start.step)) if primary else None

    iterator = iter(train_dataset(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                                  seed=trainer.seed, prefetch=data.prefetch, cache_dir=data.shard_cache_dir,
                                  rows=rows))
    if start.data_state is not None:
        iterator.set_state(start.data_state)

    loop = Trainer(train_step, iterator, place, num_train_steps=trainer.num_train_steps, writer=writer,
                   throughput=Throughput(tokens_per_step, flops_per_token * tokens_per_step, n_dev, peak.flops_per_s),
                   log_every=trainer.log_every, started_at=start_wall)
    if val_batches:
        loop.add_hook(validation, every=trainer.eval_every or None)
    if trainer.eval_tasks:
        loop.add_hook(_task_eval(config, model_config, mesh), every=trainer.eval_every or None)
    checkpointing = Checkpointing(checkpointer, iterator.get_state, on_saved=writer.sync)
    loop.add_scheduled(checkpointing.scheduled())
    loop.on_preempt(checkpointing.preempt)
    for hook in hooks:
        loop.add_scheduled(hook)
    if progress is not None:
        loop.add_listener(progress)

    final_loss = math.nan
    try:
        state = loop.run(start.state, start.step)
        # The last step's save was started in the loop; it must be committed before we return.
        checkpointer.wait()
        step = loop.step
        final_loss = loop.last_metrics.get("loss", math.nan)
        if loop.steps_run == 0:
            # Resumed a finished run: validate, and report the loss of the final state on one fresh batch.
            if validation.evaluate(state.params) is not None:
                writer.write(step, {"val_loss": validation.last})
            final_loss = float(eval_loss(state.params, place(next(iterator))))
        params_path = save_final_params(output_path, state.params)
        writer.write(step, {"blocked_in_checkpoint_s": checkpointer.blocked_seconds,
                            "wall_s": time.perf_counter() - start_wall})
    finally:
        iterator.close()
        writer.close()
        checkpointer.close()
        if progress is not None:
            progress.close()
    flops = FlopsSummary.of_run(
        num_params=model_config.num_params(), flops_per_token=flops_per_token, tokens_per_step=tokens_per_step,
        steps=step, steps_run=loop.steps_run, train_seconds=loop.train_seconds, num_devices=n_dev, peak=peak,
        # XLA counts a loop's body once, so a step that accumulates gradients in a scan is not counted.
        step_hardware_flops=compiled_step_flops(train_step, n_dev) if trainer.grad_accum == 1 else None)
    return {
        "final_loss": final_loss,
        "val_loss": validation.last,
        "steps": step,
        "start_step": start.step,
        "output_path": output_path,
        "checkpoint_path": checkpoints,
        "params_path": params_path,
        "config_path": fs.join(output_path, "config.json"),
        "metrics_path": fs.join(output_path, "metrics.jsonl"),
        "model": dataclasses.asdict(model_config),
        "tokens_per_s": loop.last_metrics.get("tokens_per_s", math.nan),
        "checkpoint_blocked_s": checkpointer.blocked_seconds,
        "devices": n_dev,
        "mesh": dict(mesh.shape),
        "processes": jax.process_count(),
        "memory": memory.to_json(),
        "run_id": run_id,
        **flops.to_json(),
    }


def _progress_bar(total: int, initial: int) -> Any:
    """A tqdm bar on a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm  # deferred: only a terminal shows a bar

    return tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)


def _cli(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m levanter.trainer CONFIG.json OUTPUT_PATH", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = config_from_dict(json.loads(fs.read_text(argv[0])))
    try:
        result = main(config, argv[1])
    except TrainingPreempted as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
