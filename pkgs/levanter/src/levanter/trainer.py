"""Training a Llama on tokenized data: one config dataclass plus ``main(config)``.

Run from a shell with ``python -m levanter.trainer CONFIG.json``; a run stopped by SIGTERM saves a
checkpoint and exits with :data:`PREEMPTED_EXIT_CODE` (75), and running it again resumes.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from levanter.checkpoint import CheckpointConfig, Checkpointer
from levanter.data import DatasetSpec, data_vocab_size, eval_batches, train_dataset
from levanter.flops import device_peak_flops
from levanter.metrics import MetricsWriter
from levanter.models.llama import LlamaConfig, transformed_llama
from levanter.optim import AdamConfig
from rigging import filesystem as fs

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "ComputeDtype",
    "NonFiniteLossError",
    "TrainerConfig",
    "TrainingPreempted",
    "config_from_dict",
    "config_to_dict",
    "loss_fn",
    "main",
    "make_train_step",
]

logger = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 75
"""Exit status of ``python -m levanter.trainer`` after a SIGTERM (EX_TEMPFAIL: run it again)."""


class ComputeDtype(enum.Enum):
    """Precision of activations and matmuls; parameters and optimizer state stay float32."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"

    @property
    def jnp(self) -> jnp.dtype:
        """The JAX dtype."""
        return jnp.float32 if self is ComputeDtype.FLOAT32 else jnp.bfloat16


class TrainingPreempted(Exception):
    """SIGTERM arrived: a checkpoint of ``step`` was committed and the run can be resumed.

    ``exit_code`` is what a command-line wrapper should exit with (:data:`PREEMPTED_EXIT_CODE`).
    """

    exit_code = PREEMPTED_EXIT_CODE

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


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Everything one training run needs."""

    model: LlamaConfig
    """Model shape; its vocab_size is replaced by the data's when ``vocab_from_data``."""
    optimizer: AdamConfig
    """Optimizer and learning-rate schedule."""
    datasets: tuple[DatasetSpec, ...]
    """Tokenized datasets (``index.json`` folders) and their mixture weights."""
    output_path: str
    """Folder (local or gs://) for checkpoints, final params, metrics and config."""
    batch_size: int = 8
    """Sequences per optimizer step (global, over all devices and accumulation steps)."""
    seq_len: int = 128
    """Tokens per sequence (each window holds seq_len + 1 tokens: inputs and shifted targets)."""
    num_train_steps: int = 100
    """Optimizer steps."""
    seed: int = 0
    """Seeds parameter init and the data order."""
    grad_accum: int = 1
    """Micro-batches per step; batch_size must be divisible by grad_accum * devices."""
    compute_dtype: ComputeDtype = ComputeDtype.FLOAT32
    """float32 or bfloat16 activations (a ``ComputeDtype`` or its string value)."""
    eval_every: int = 0
    """Validation loss every this many steps and at the end (0: only at the end)."""
    eval_batches: int = 4
    """Validation batches per evaluation (0 disables validation)."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoint frequency and retention."""
    checkpoint_path: str | None = None
    """Where checkpoints go; default ``<output_path>/checkpoints``."""
    vocab_from_data: bool = True
    """Replace model.vocab_size by the tokenized data's vocabulary size."""
    log_every: int = 1
    """Write metrics every this many steps (does not change the result)."""
    prefetch: int = 4
    """Batches prepared ahead by a background thread (does not change the result)."""
    peak_flops_per_device: float | None = None
    """Peak FLOP/s for MFU; None: datasheet value for known accelerators, measured on CPU."""
    shard_cache_dir: str | None = None
    """Local folder for copies of remote shards (default: a temp folder)."""

    def __post_init__(self) -> None:
        if isinstance(self.compute_dtype, str):
            try:
                object.__setattr__(self, "compute_dtype", ComputeDtype(self.compute_dtype))
            except ValueError:
                raise ValueError(f"compute_dtype must be one of {[d.value for d in ComputeDtype]}, "
                                 f"got {self.compute_dtype!r}") from None
        if not isinstance(self.datasets, tuple):
            object.__setattr__(self, "datasets", tuple(self.datasets))
        if not self.datasets:
            raise ValueError("datasets must name at least one dataset, got none")
        for name in ("batch_size", "seq_len", "num_train_steps", "grad_accum", "log_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("eval_every", "eval_batches", "prefetch"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size must be divisible by grad_accum, got batch_size={self.batch_size} "
                             f"and grad_accum={self.grad_accum}")
        if not self.output_path:
            raise ValueError(f"output_path must be non-empty, got {self.output_path!r}")
        if self.peak_flops_per_device is not None and not self.peak_flops_per_device > 0:
            raise ValueError(f"peak_flops_per_device must be > 0, got {self.peak_flops_per_device}")

    @property
    def resolved_checkpoint_path(self) -> str:
        """Checkpoint folder actually used."""
        return self.checkpoint_path or fs.join(self.output_path, "checkpoints")


# --------------------------------------------------------------------------- config (de)serialisation

def config_to_dict(config: TrainerConfig) -> dict[str, Any]:
    """JSON-ready form of ``config`` (enums as their values)."""
    def plain(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value
    return plain(dataclasses.asdict(config))


def config_from_dict(data: Mapping[str, Any]) -> TrainerConfig:
    """Inverse of :func:`config_to_dict`."""
    data = dict(data)
    data["model"] = LlamaConfig(**data["model"])
    data["optimizer"] = AdamConfig(**data["optimizer"])
    data["datasets"] = tuple(DatasetSpec(**d) for d in data["datasets"])
    data["checkpoint"] = CheckpointConfig(**data["checkpoint"])
    return TrainerConfig(**data)


# --------------------------------------------------------------------------- the math

def loss_fn(model: hk.Transformed, params: Any, batch: jax.Array, compute_dtype: jnp.dtype) -> jax.Array:
    """Mean next-token cross entropy of ``batch`` ``[b, seq_len + 1]`` (float32)."""
    # Master weights stay float32; a bfloat16 policy runs the forward on a cast copy.
    cast = jax.tree.map(lambda p: p.astype(compute_dtype), params)
    logits = model.apply(cast, None, batch[:, :-1])
    targets = batch[:, 1:]
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(logz - picked)


def make_train_step(model: hk.Transformed, tx: optax.GradientTransformation, lr: optax.Schedule,
                    compute_dtype: jnp.dtype, grad_accum: int,
                    batch_sharding: NamedSharding | None = None) -> Callable[[dict, jax.Array], tuple[dict, dict]]:
    """The un-jitted step ``(state, batch) -> (state, metrics)``.

    ``state`` is ``{"params", "opt_state", "step", "key"}``. With ``grad_accum > 1`` the batch is
    split into micro-batches whose gradients are averaged (a scan, so memory holds one micro-batch
    of activations); row ``r`` goes to micro-batch ``r % grad_accum`` so each device keeps its rows.
    """
    grad_fn = jax.value_and_grad(lambda p, b: loss_fn(model, p, b, compute_dtype))

    def step(state: dict, batch: jax.Array) -> tuple[dict, dict]:
        params = state["params"]
        if grad_accum == 1:
            loss, grads = grad_fn(params, batch)
        else:
            micro = batch.reshape(batch.shape[0] // grad_accum, grad_accum, batch.shape[1]).swapaxes(0, 1)
            if batch_sharding is not None:
                micro = jax.lax.with_sharding_constraint(
                    micro, NamedSharding(batch_sharding.mesh, P(None, *batch_sharding.spec)))

            def body(carry, mb):
                loss_sum, grad_sum = carry
                loss_i, grads_i = grad_fn(params, mb)
                return (loss_sum + loss_i, jax.tree.map(jnp.add, grad_sum, grads_i)), None

            zeros = jax.tree.map(jnp.zeros_like, params)
            (loss_sum, grad_sum), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), micro)
            loss = loss_sum / grad_accum
            grads = jax.tree.map(lambda g: g / grad_accum, grad_sum)
        updates, opt_state = tx.update(grads, state["opt_state"], params)
        new_state = {"params": optax.apply_updates(params, updates), "opt_state": opt_state,
                     "step": state["step"] + 1, "key": state["key"]}
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": lr(state["step"])}
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


def _save_final(config: TrainerConfig, params: Any) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **_flatten_params(jax.device_get(params)))
    path = fs.join(config.output_path, "final", "params.npz")
    fs.atomic_write(path, buffer.getvalue())
    return path


def _resolve_model(config: TrainerConfig) -> LlamaConfig:
    model = config.model
    if config.vocab_from_data:
        vocab = data_vocab_size(config.datasets)
        if vocab != model.vocab_size:
            logger.info("model vocab_size %d replaced by the data's %d", model.vocab_size, vocab)
            model = dataclasses.replace(model, vocab_size=vocab)
    if config.seq_len > model.max_seq_len:
        # RoPE has no position table, so a longer context only changes the recorded limit.
        logger.warning("seq_len %d exceeds model max_seq_len %d; extending max_seq_len",
                       config.seq_len, model.max_seq_len)
        model = dataclasses.replace(model, max_seq_len=config.seq_len)
    return model


# --------------------------------------------------------------------------- main

def main(config: TrainerConfig) -> dict[str, Any]:
    """Train (or resume training) as ``config`` says and return a summary.

    Returns:
        ``{"final_loss", "val_loss", "steps", "start_step", "output_path", "checkpoint_path",
        "params_path", "config_path", "metrics_path", "model", "tokens_per_s", "mfu"}``
        (``val_loss`` is None without validation data; ``start_step`` > 0 after a resume).

    Raises:
        TrainingPreempted: SIGTERM arrived; a checkpoint was committed first.
        NonFiniteLossError: the loss became NaN or infinite.
    """
    model_config = _resolve_model(config)
    config = dataclasses.replace(config, model=model_config)
    devices = jax.devices()
    n_dev = len(devices)
    micro = config.batch_size // config.grad_accum
    if micro % n_dev:
        raise ValueError(f"batch_size / grad_accum = {micro} must be divisible by the {n_dev} devices")
    mesh = Mesh(np.asarray(devices), ("data",))
    replicated = NamedSharding(mesh, P())
    batch_sharding = NamedSharding(mesh, P("data"))
    dtype = config.compute_dtype.jnp

    model = transformed_llama(model_config, dtype)
    init_model = transformed_llama(model_config, jnp.float32)
    tx = config.optimizer.build(config.num_train_steps)
    lr = config.optimizer.lr_schedule(config.num_train_steps)

    def init_state(key: jax.Array) -> dict:
        init_key, key = jax.random.split(key)
        params = init_model.init(init_key, jnp.zeros((1, config.seq_len), jnp.int32))
        return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32), "key": key}

    start_wall = time.perf_counter()
    state = jax.jit(init_state, out_shardings=replicated)(jax.random.PRNGKey(config.seed))
    checkpointer = Checkpointer(config.resolved_checkpoint_path, config.checkpoint)
    restored = checkpointer.restore_latest(state)
    start_step = 0
    if restored is not None:
        state, start_step = restored.state, restored.step
        logger.info("resuming from checkpoint step %d", start_step)

    train_step = jax.jit(make_train_step(model, tx, lr, dtype, config.grad_accum, batch_sharding),
                         out_shardings=replicated)
    eval_loss = jax.jit(lambda params, batch: loss_fn(model, params, batch, dtype))
    val_batches = (eval_batches(config.datasets, seq_len=config.seq_len, batch_size=config.batch_size,
                                max_batches=config.eval_batches, cache_dir=config.shard_cache_dir)
                   if config.eval_batches else [])
    val_batches = [b for b in val_batches if b.shape[0] % n_dev == 0]
    if config.eval_batches and not val_batches:
        logger.warning("no validation loss: the validation split cannot fill one batch of %d x %d tokens",
                       config.batch_size, config.seq_len + 1)

    def validate(params: Any) -> float | None:
        if not val_batches:
            return None
        losses = [eval_loss(params, jax.make_array_from_process_local_data(batch_sharding, b))
                  for b in val_batches]
        return float(np.mean(jax.device_get(losses)))

    peak = config.peak_flops_per_device or device_peak_flops(dtype, devices[0])
    flops_per_step = model_config.flops_per_token(config.seq_len) * config.batch_size * config.seq_len
    tokens_per_step = config.batch_size * config.seq_len

    fs.atomic_write(fs.join(config.output_path, "config.json"), json.dumps(config_to_dict(config), indent=2))
    writer = MetricsWriter(config.output_path, resume_step=start_step)
    progress = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        progress = tqdm(total=config.num_train_steps, initial=start_step, desc="train", dynamic_ncols=True)

    iterator = iter(train_dataset(config.datasets, seq_len=config.seq_len, batch_size=config.batch_size,
                                  seed=config.seed, prefetch=config.prefetch, cache_dir=config.shard_cache_dir))
    if restored is not None:
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
            if step_no % config.log_every == 0 or step_no == config.num_train_steps or step_no == start_step + 1:
                writer.write(step_no, values)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{values['loss']:.3f}")

    step = start_step
    try:
        with _SigtermFlag() as sigterm:
            last["time"] = time.perf_counter()
            while step < config.num_train_steps:
                t0 = time.perf_counter()
                batch = next(iterator)
                wait_s = time.perf_counter() - t0
                state, metrics = train_step(state, jax.make_array_from_process_local_data(batch_sharding, batch))
                step += 1
                pending.append((step, metrics, wait_s))
                drain(keep=1)
                due_eval = config.eval_every and step % config.eval_every == 0 and step < config.num_train_steps
                due_save = checkpointer.should_save(step, config.num_train_steps)
                if due_eval or due_save or sigterm.set:
                    drain(keep=0)  # never checkpoint a state whose loss was not checked
                if due_eval:
                    val_loss = validate(state["params"])
                    writer.write(step, {"val_loss": val_loss})
                if due_save or sigterm.set:
                    checkpointer.save(step, state, iterator.get_state(), wait=sigterm.set)
                    writer.sync()
                if sigterm.set:
                    raise TrainingPreempted(step, config.resolved_checkpoint_path)
            drain(keep=0)
            # The last step's save was started in the loop; it must be committed before we return.
            checkpointer.wait()
        val_loss = validate(state["params"])
        if val_loss is not None:
            writer.write(step, {"val_loss": val_loss})
        if start_step == config.num_train_steps:
            # Resumed a finished run: report the loss of the final state on one fresh batch.
            last["loss"] = float(eval_loss(state["params"], jax.make_array_from_process_local_data(
                batch_sharding, next(iterator))))
        params_path = _save_final(config, state["params"])
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
        "output_path": config.output_path,
        "checkpoint_path": config.resolved_checkpoint_path,
        "params_path": params_path,
        "config_path": fs.join(config.output_path, "config.json"),
        "metrics_path": fs.join(config.output_path, "metrics.jsonl"),
        "model": dataclasses.asdict(model_config),
        "tokens_per_s": last["tokens_per_s"],
        "mfu": last["mfu"],
        "checkpoint_blocked_s": checkpointer.blocked_seconds,
        "devices": n_dev,
    }


def _cli(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m levanter.trainer CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = config_from_dict(json.loads(fs.read_text(argv[0])))
    try:
        result = main(config)
    except TrainingPreempted as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
