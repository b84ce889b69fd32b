"""Training a Llama on tokenized data: ``main(config, output_path)`` over one :class:`TrainLmConfig`.

Run from a shell with ``python -m levanter.trainer CONFIG.json OUTPUT_PATH``; a run stopped by
SIGTERM saves a checkpoint and exits with :data:`PREEMPTED_EXIT_CODE` (75), and running it again
resumes. The config classes live in :mod:`levanter.config` (no JAX import) and are re-exported here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from fray.types import PREEMPTED_EXIT_CODE, Preempted
from levanter.checkpoint import Checkpointer, checkpoint_dir, restore_checkpoint
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
from levanter.data.chat import ROW_IDS, ROW_SEGMENTS, loss_weights
from levanter.flops import device_peak_flops
from levanter.initialize import CheckpointStart, HfCheckpoint, TrainedModel, initial_params
from levanter.memory import MEMORY_FILE, measure_memory
from levanter.metrics import MetricsWriter
from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.optim import learning_rate
from levanter.sharding import activation_sharder, batch_spec, make_mesh, process_rows, tree_shardings
from rigging import filesystem as fs
from rigging.progress import ProgressWriter

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "ComputeDtype",
    "DataConfig",
    "NonFiniteLossError",
    "TrainLmConfig",
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
]

logger = logging.getLogger(__name__)


class TrainingPreempted(Preempted):
    """SIGTERM arrived: a checkpoint of ``step`` was committed and the run can be resumed.

    ``exit_code`` is what a command-line wrapper should exit with (:data:`PREEMPTED_EXIT_CODE`).
    """

    def __init__(self, step: int, checkpoint_path: str):
        super().__init__(f"preempted by SIGTERM after step {step}; checkpoint saved under {checkpoint_path}; "
                         "run again to resume")
        self.step = step
        self.checkpoint_path = checkpoint_path


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; ``step`` names the (1-based) step."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"training loss is {loss} at step {step}; stopping (lower the learning rate, "
                         "enable gradient clipping or use float32 compute)")
        self.step = step
        self.loss = loss


# --------------------------------------------------------------------------- the math

def _loss_terms(model: hk.Transformed, params: Any, batch: jax.Array,
                compute_dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
    """(mean next-token cross entropy, mean squared log-partition) of ``batch``.

    ``batch`` is ``[b, seq_len + 1]`` token ids (every target counts), or chat windows
    ``[b, 3, seq_len + 1]`` (ids, loss mask, segment ids; ``levanter.data.chat``): then attention
    stays inside each segment and both means run over the targets whose mask is on and whose
    segment is the input's (never across a conversation boundary, never padding).
    """
    # Master weights stay float32; a bfloat16 policy runs the forward on a cast copy.
    cast = jax.tree.map(lambda p: p.astype(compute_dtype), params)
    if batch.ndim == 3:
        tokens, segments = batch[:, ROW_IDS], batch[:, ROW_SEGMENTS]
        logits = model.apply(cast, None, tokens[:, :-1], segment_ids=segments[:, :-1])
        weights = loss_weights(batch).astype(jnp.float32)
    else:
        tokens, weights = batch, None
        logits = model.apply(cast, None, tokens[:, :-1])  # float32
    targets = tokens[:, 1:]
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    if weights is None:
        return jnp.mean(logz - picked), jnp.mean(jnp.square(logz))
    count = jnp.maximum(jnp.sum(weights), 1.0)
    return jnp.sum((logz - picked) * weights) / count, jnp.sum(jnp.square(logz) * weights) / count


def loss_fn(model: hk.Transformed, params: Any, batch: jax.Array, compute_dtype: jnp.dtype,
            z_loss_weight: float = 0.0) -> jax.Array:
    """Mean next-token cross entropy of ``batch`` (float32; shapes in ``_loss_terms``), plus the z-loss
    ``z_loss_weight * mean(logsumexp(logits)^2)`` when the weight is not 0."""
    ce, z = _loss_terms(model, params, batch, compute_dtype)
    return ce + z_loss_weight * z if z_loss_weight else ce


def make_train_step(model: hk.Transformed, tx: optax.GradientTransformation, compute_dtype: jnp.dtype,
                    grad_accum: int, batch_sharding: NamedSharding | None = None,
                    z_loss_weight: float = 0.0) -> Callable[[dict, jax.Array], tuple[dict, dict]]:
    """The un-jitted step ``(state, batch) -> (state, metrics)``.

    ``state`` is ``{"params", "opt_state", "step", "key"}``. With ``grad_accum > 1`` the batch is
    split into micro-batches whose gradients are averaged (a scan, so memory holds one micro-batch
    of activations); row ``r`` goes to micro-batch ``r % grad_accum`` so each device keeps its rows.
    Metrics: ``loss`` is the cross entropy (comparable to the validation loss), ``z_loss`` the
    weighted z-loss term when there is one, ``lr`` the rate the optimizer just applied.
    """
    def objective(params: Any, batch: jax.Array) -> tuple[jax.Array, jax.Array]:
        ce, z = _loss_terms(model, params, batch, compute_dtype)
        return (ce + z_loss_weight * z if z_loss_weight else ce), ce

    grad_fn = jax.value_and_grad(objective, has_aux=True)

    def step(state: dict, batch: jax.Array) -> tuple[dict, dict]:
        params = state["params"]
        if grad_accum == 1:
            (total, loss), grads = grad_fn(params, batch)
        else:
            micro = batch.reshape(batch.shape[0] // grad_accum, grad_accum, *batch.shape[1:]).swapaxes(0, 1)
            if batch_sharding is not None:
                micro = jax.lax.with_sharding_constraint(
                    micro, NamedSharding(batch_sharding.mesh, P(None, *batch_sharding.spec)))

            def body(carry, mb):
                total_sum, loss_sum, grad_sum = carry
                (total_i, loss_i), grads_i = grad_fn(params, mb)
                return (total_sum + total_i, loss_sum + loss_i, jax.tree.map(jnp.add, grad_sum, grads_i)), None

            zeros = jax.tree.map(jnp.zeros_like, params)
            zero = jnp.zeros((), jnp.float32)
            (total_sum, loss_sum, grad_sum), _ = jax.lax.scan(body, (zero, zero, zeros), micro)
            total, loss = total_sum / grad_accum, loss_sum / grad_accum
            grads = jax.tree.map(lambda g: g / grad_accum, grad_sum)
        updates, opt_state = tx.update(grads, state["opt_state"], params)
        new_state = {"params": optax.apply_updates(params, updates), "opt_state": opt_state,
                     "step": state["step"] + 1, "key": state["key"]}
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": learning_rate(opt_state)}
        if z_loss_weight:
            metrics["z_loss"] = total - loss
        return new_state, metrics

    return step


# --------------------------------------------------------------------------- helpers

class _SigtermFlag:
    """Turns SIGTERM into a flag the loop polls between steps (only the main thread can install it)."""

    def __init__(self) -> None:
        self.set = False
        self._previous: Any = None

    def __enter__(self) -> _SigtermFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.set = True

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _flatten_params(params: Any) -> dict[str, np.ndarray]:
    return {f"{module}/{name}": np.asarray(value)
            for module, names in params.items() for name, value in names.items()}


def _save_final(output_path: str, params: Any) -> str:
    path = fs.join(output_path, "final", "params.npz")
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        host = multihost_utils.process_allgather(params, tiled=True)  # a collective: every process calls it
    else:
        host = jax.device_get(params)
    if jax.process_index() == 0:
        buffer = io.BytesIO()
        np.savez(buffer, **_flatten_params(host))
        fs.atomic_write(path, buffer.getvalue())
    return path


def _join_distributed() -> None:
    """Join the multi-host JAX job this process was launched into (``iris.multihost``), once."""
    from iris.multihost import initialize_jax

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


def _resolve_model(config: TrainLmConfig) -> LlamaConfig:
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


def _state_initializer(model_config: LlamaConfig, tx: optax.GradientTransformation,
                       seq_len: int) -> Callable[[jax.Array], dict]:
    """``key -> state``: fresh float32 parameters, optimizer state, step 0 and the PRNG key."""
    init_model = transformed_llama(model_config, jnp.float32)

    def init_state(key: jax.Array) -> dict:
        init_key, key = jax.random.split(key)
        params = init_model.init(init_key, jnp.zeros((1, seq_len), jnp.int32))
        return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32), "key": key}

    return init_state


def abstract_state(model_config: LlamaConfig, tx: optax.GradientTransformation, seq_len: int,
                   mesh: jax.sharding.Mesh) -> Any:
    """Shapes, dtypes and shardings on ``mesh`` of the training state (a restore target; allocates nothing)."""
    shapes = jax.eval_shape(_state_initializer(model_config, tx, seq_len), jax.random.PRNGKey(0))
    shardings = tree_shardings(shapes, mesh, units={"heads": model_config.num_heads,
                                                    "kv_heads": model_config.num_kv_heads})
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


# --------------------------------------------------------------------------- main

def main(config: TrainLmConfig, output_path: str) -> dict[str, Any]:
    """Train (or resume training) as ``config`` says, writing into ``output_path``; return a summary.

    ``output_path`` (local or gs://) receives ``config.json``, ``metrics.jsonl``, TensorBoard
    events, checkpoints (:func:`checkpoint_dir`) and ``final/params.npz``.

    Returns:
        ``{"final_loss", "val_loss", "steps", "start_step", "output_path", "checkpoint_path",
        "params_path", "config_path", "metrics_path", "model", "tokens_per_s", "mfu", "run_id"}``
        (``val_loss`` is None without validation data; ``start_step`` > 0 after a resume).

    Raises:
        TrainingPreempted: SIGTERM arrived; a checkpoint was committed first.
        NonFiniteLossError: the loss became NaN or infinite.
    """
    if not output_path:
        raise ValueError(f"output_path must be non-empty, got {output_path!r}")
    _join_distributed()
    model_config = _resolve_model(config)
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

    units = {"heads": model_config.num_heads, "kv_heads": model_config.num_kv_heads}
    model = transformed_llama(model_config, dtype, shard=activation_sharder(mesh, units))
    tx = config.optimizer.build(trainer.num_train_steps)
    init_state = _state_initializer(model_config, tx, trainer.seq_len)

    start_wall = time.perf_counter()
    target = abstract_state(model_config, tx, trainer.seq_len, mesh)
    state_shardings = jax.tree.map(lambda s: s.sharding, target)
    checkpoints = checkpoint_dir(output_path)
    checkpointer = Checkpointer(checkpoints, trainer.checkpoint)
    # Restored onto this run's mesh, whatever mesh saved it.
    restored = checkpointer.restore_latest(target)
    # Another run's checkpoint (a branch or an extension) is restored whole, like a resume.
    start = trainer.initialize_from if restored is None and isinstance(trainer.initialize_from, CheckpointStart) \
        else None
    if start is not None:
        restored = restore_checkpoint(str(start.checkpoint_path), start.step, target)
        logger.info("starting from step %d of %s", start.step, start.checkpoint_path)
    start_step = 0
    if restored is not None:
        state, start_step = restored.state, restored.step
        logger.info("resuming from checkpoint step %d", start_step)
    else:
        # Parameters are created already split: no device ever holds the whole model.
        state = jax.jit(init_state, out_shardings=state_shardings)(jax.random.PRNGKey(trainer.seed))
        if isinstance(trainer.initialize_from, HfCheckpoint | TrainedModel):
            params = initial_params(trainer.initialize_from, model_config)
            state = jax.jit(lambda p, s: {**s, "params": p, "opt_state": tx.init(p)},
                            out_shardings=state_shardings)(params, state)
            logger.info("initialised from %s", trainer.initialize_from)

    # Chat data comes as [3, seq_len + 1] windows (ids, loss mask, segment ids; levanter.data.chat).
    window = (3, trainer.seq_len + 1) if data_is_chat(data.datasets) else (trainer.seq_len + 1,)
    batch_shape = jax.ShapeDtypeStruct((trainer.batch_size, *window), jnp.int32, sharding=batch_sharding)
    # Compiled ahead of time, once: a batch or state placed differently is an error, not a recompile.
    # The old state is donated, so parameters and optimizer state are held once, not twice, per step.
    train_step = jax.jit(make_train_step(model, tx, dtype, trainer.grad_accum, batch_sharding,
                                         z_loss_weight=config.z_loss_weight),
                         in_shardings=(state_shardings, batch_sharding), out_shardings=(state_shardings, replicated),
                         donate_argnums=0).lower(target, batch_shape).compile()
    memory = measure_memory(mesh, state["params"], state["opt_state"], train_step)
    logger.info("%s", memory.summary())
    if primary:
        fs.atomic_write(fs.join(output_path, MEMORY_FILE), memory.dumps())

    def place(local: np.ndarray) -> jax.Array:
        """The global batch array, assembled from the rows this process holds."""
        return jax.make_array_from_process_local_data(batch_sharding, local, batch_shape.shape)

    eval_loss = jax.jit(lambda params, batch: loss_fn(model, params, batch, dtype),
                        in_shardings=(state_shardings["params"], batch_sharding), out_shardings=replicated)
    val_batches = (eval_batches(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                                max_batches=trainer.eval_batches, cache_dir=data.shard_cache_dir)
                   if trainer.eval_batches else [])
    val_batches = [b[rows] for b in val_batches]
    if trainer.eval_batches and not val_batches:
        logger.warning("no validation loss: the validation split cannot fill one batch of %d x %d tokens",
                       trainer.batch_size, trainer.seq_len + 1)

    def validate(params: Any) -> float | None:
        if not val_batches:
            return None
        losses = [eval_loss(params, place(b)) for b in val_batches]
        return float(np.mean(jax.device_get(losses)))

    peak = trainer.peak_flops_per_device or device_peak_flops(dtype, devices[0])
    flops_per_step = model_config.flops_per_token(trainer.seq_len) * trainer.batch_size * trainer.seq_len
    tokens_per_step = trainer.batch_size * trainer.seq_len

    config_json = config_to_dict(config)
    if primary:
        fs.atomic_write(fs.join(output_path, "config.json"), json.dumps(config_json, indent=2))
    earlier_rows = str(start.metrics_path) if start is not None and start.metrics_path else None
    writer = (MetricsWriter(output_path, resume_step=start_step, run_id=run_id, tags=trainer.tags,
                            wandb=trainer.wandb, run_config=config_json, earlier_rows=earlier_rows)
              if primary else _NullWriter())
    # How far the run has got, beside its output, for whoever watches it (marin's runner display).
    reported = ProgressWriter(output_path, total=trainer.num_train_steps, unit="step") if primary else None
    progress = None
    if primary and sys.stderr.isatty():
        from tqdm import tqdm

        progress = tqdm(total=trainer.num_train_steps, initial=start_step, desc="train", dynamic_ncols=True)

    iterator = iter(train_dataset(data.datasets, seq_len=trainer.seq_len, batch_size=trainer.batch_size,
                                  seed=trainer.seed, prefetch=data.prefetch, cache_dir=data.shard_cache_dir,
                                  rows=rows))
    if restored is not None and not (start is not None and start.reset_data_loader):
        iterator.set_state(restored.data_state)

    # Metrics of a step are read one step late so the host never waits on the device mid-loop.
    pending: list[tuple[int, dict, float]] = []
    last = {"loss": math.nan, "tokens_per_s": math.nan, "mfu": math.nan, "time": None}
    val_loss: float | None = None

    def drain(keep: int) -> None:
        while len(pending) > keep:
            step_no, metrics, wait_s = pending.pop(0)
            values = {k: float(v) for k, v in jax.device_get(metrics).items()}
            now = time.perf_counter()
            if not math.isfinite(values["loss"]):
                raise NonFiniteLossError(step_no, values["loss"])
            step_time = now - last["time"] if last["time"] is not None else math.nan
            last["time"] = now
            last["loss"] = values["loss"]
            if step_time == step_time:
                values["step_time"] = step_time
                values["tokens_per_s"] = last["tokens_per_s"] = tokens_per_step / step_time
                values["mfu"] = last["mfu"] = flops_per_step / step_time / (peak * n_dev)
                values["input_wait_frac"] = min(wait_s / step_time, 1.0)
            if step_no == start_step + 1:
                # Start-up cost (init or restore, compilation, first batch): what a resume pays.
                values["time_to_first_step_s"] = now - start_wall
            if (step_no % trainer.log_every == 0 or step_no == trainer.num_train_steps
                    or step_no == start_step + 1):
                writer.write(step_no, values)
            if reported is not None:
                reported.update(step_no, loss=values["loss"], tokens_per_s=last["tokens_per_s"])
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{values['loss']:.3f}")

    step = start_step
    try:
        with _SigtermFlag() as sigterm:
            last["time"] = time.perf_counter()
            while step < trainer.num_train_steps:
                t0 = time.perf_counter()
                batch = next(iterator)
                wait_s = time.perf_counter() - t0
                state, metrics = train_step(state, place(batch))
                step += 1
                pending.append((step, metrics, wait_s))
                drain(keep=1)
                due_eval = trainer.eval_every and step % trainer.eval_every == 0 and step < trainer.num_train_steps
                due_save = checkpointer.should_save(step, trainer.num_train_steps)
                if due_eval or due_save or sigterm.set:
                    drain(keep=0)  # never checkpoint a state whose loss was not checked
                if due_eval:
                    val_loss = validate(state["params"])
                    writer.write(step, {"val_loss": val_loss})
                if due_save or sigterm.set:
                    checkpointer.save(step, state, iterator.get_state(), wait=sigterm.set)
                    writer.sync()
                if sigterm.set:
                    raise TrainingPreempted(step, checkpoints)
            drain(keep=0)
            # The last step's save was started in the loop; it must be committed before we return.
            checkpointer.wait()
        val_loss = validate(state["params"])
        if val_loss is not None:
            writer.write(step, {"val_loss": val_loss})
        if start_step == trainer.num_train_steps:
            # Resumed a finished run: report the loss of the final state on one fresh batch.
            last["loss"] = float(eval_loss(state["params"], place(next(iterator))))
        params_path = _save_final(output_path, state["params"])
        writer.write(step, {"blocked_in_checkpoint_s": checkpointer.blocked_seconds,
                            "wall_s": time.perf_counter() - start_wall})
    finally:
        iterator.close()
        writer.close()
        checkpointer.close()
        if progress is not None:
            progress.close()
    return {
        "final_loss": last["loss"],
        "val_loss": val_loss,
        "steps": step,
        "start_step": start_step,
        "output_path": output_path,
        "checkpoint_path": checkpoints,
        "params_path": params_path,
        "config_path": fs.join(output_path, "config.json"),
        "metrics_path": fs.join(output_path, "metrics.jsonl"),
        "model": dataclasses.asdict(model_config),
        "tokens_per_s": last["tokens_per_s"],
        "mfu": last["mfu"],
        "checkpoint_blocked_s": checkpointer.blocked_seconds,
        "devices": n_dev,
        "mesh": dict(mesh.shape),
        "processes": jax.process_count(),
        "memory": memory.to_json(),
        "run_id": run_id,
    }


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
