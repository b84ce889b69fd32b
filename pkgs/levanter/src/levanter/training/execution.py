"""How a run's step is executed (never what it computes): the remat policy and attention kernel it
runs with, where its optimizer state lives, the compiled step, and its FLOPs as XLA counts them.

``remat="auto"`` is chosen here by the shapes' memory estimate (``levanter.memory_estimate``)
against the device's memory; the estimate is kept for ``memory.json``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp

from levanter.ema import averaged_step
from levanter.memory_estimate import MemoryEstimate, choose_remat, estimate_memory
from levanter.models.impl import Attention, Impl, LossImpl, Remat, resolve_unroll
from levanter.ops.cross_entropy import resolve_loss_impl
from levanter.training.step import make_train_step

__all__ = ["Execution", "device_memory", "offload_opt_state", "plan_execution", "step_flops"]

logger = logging.getLogger(__name__)

HOST = "pinned_host"
"""The memory kind an offloaded optimizer state lives in between steps."""


def device_memory(device: Any) -> int | None:
    """Bytes of memory ``device`` offers a program (None where the backend does not say: a CPU)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    limit = (stats or {}).get("bytes_limit")
    return int(limit) if limit else None


@dataclasses.dataclass(frozen=True)
class Execution:
    """How the run's step runs."""

    impl: Impl
    """Remat policy and attention kernel (resolved: never ``AUTO``)."""
    estimate: MemoryEstimate
    """The memory estimate of that choice."""
    available: int | None
    """The device's memory the choice was made against (None: not known, nothing was constrained)."""


def plan_execution(config: Any, model_config: Any, mesh: Any, device: Any) -> Execution:
    """The remat policy, attention kernel, loss and layer unroll of run ``config`` (a ``TrainLmConfig``) on ``device``."""
    from levanter.models._llama_haiku import resolve_attention

    trainer = config.trainer
    attention = resolve_attention(trainer.attention, trainer.seq_len)
    loss = resolve_loss_impl(trainer.loss_impl, getattr(model_config, "hidden_dim", None))
    sizes = dict(mesh.shape)
    kwargs: dict[str, Any] = dict(batch=trainer.batch_size // trainer.grad_accum, seq_len=trainer.seq_len,
                  compute_bytes=jnp.dtype(trainer.compute_dtype.jnp).itemsize, attention=attention,
                  optimizer=config.optimizer, offload_optimizer=trainer.offload_optimizer,
                  grad_bytes=jnp.dtype(trainer.grad_dtype).itemsize,
                  loss_block=trainer.loss_block, loss_impl=loss, shards=sizes["fsdp"] * sizes["tensor"],
                  batch_shards=sizes["data"] * sizes["fsdp"])
    available = device_memory(device)
    if trainer.remat is not Remat.AUTO:
        remat, estimate = trainer.remat, estimate_memory(model_config, remat=trainer.remat, **kwargs)
    elif available is None:
        remat, estimate = Remat.NONE, estimate_memory(model_config, remat=Remat.NONE, **kwargs)
    else:
        remat, estimate = choose_remat(model_config, available, **kwargs)
    unroll = resolve_unroll(trainer.layer_unroll, getattr(model_config, "num_layers", 1))
    logger.info("step: remat=%s attention=%s loss=%s unroll=%s; memory estimate %s%s", remat.value, attention.value,
                loss.value, unroll, estimate.describe(), "" if available is None else f" of {available / 2**30:.1f} GiB")
    impl = Impl(remat=remat, attention=attention, loss=loss, unroll=unroll)
    return Execution(impl=impl, estimate=estimate, available=available)


def offload_opt_state(target: Any) -> Any:
    """``target`` (an abstract ``TrainState``) with its optimizer state placed in host memory."""
    def host(leaf: Any) -> Any:
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding.with_memory_kind(HOST))

    return target.replace(opt_state=jax.tree.map(host, target.opt_state))


def compile_step(model: Any, config: Any, layout: Any, target: Any, batch_shape: Any, rate: Any, *,
                 objective: Any = None, trained: Any = None) -> Any:
    """The step of ``model`` for run ``config``, compiled once for ``target``'s placement.

    The old state is donated, so parameters and optimizer state are held once, not twice. An
    offloaded optimizer state is brought to the device for the update and goes back after.
    ``objective`` replaces the language-model loss (``levanter.training.step``); ``trained``
    (``levanter.training.trained.Trained``) binds the weights the run holds fixed (LoRA's base) as
    the step's last argument. The run's ``trainer.ema`` moves its average after each update.
    """
    trainer = config.trainer
    state_shardings = jax.tree.map(lambda s: s.sharding, target)
    on_device = None
    if trainer.offload_optimizer:
        on_device = jax.tree.map(lambda s: s.sharding.with_memory_kind("device"), target.opt_state)
    step = make_train_step(model, config.optimizer.at_rate, trainer.compute_dtype.jnp, trainer.grad_accum,
                           layout.batch_sharding, z_loss_weight=config.z_loss_weight, loss_block=trainer.loss_block,
                           opt_state_device=on_device, grad_dtype=jnp.dtype(trainer.grad_dtype), objective=objective)
    if trainer.ema is not None:  # debiased by the count the state keeps (levanter.ema), which the step does not know
        step = averaged_step(step, trainer.ema)
    in_shardings = (state_shardings, layout.batch_sharding, layout.replicated)
    out_shardings = (state_shardings, layout.replicated)
    if trained is not None:
        return trained.compile(step, in_shardings, out_shardings, args=(target, batch_shape, rate), donate_argnums=(0,))
    # Compiled ahead of time, once: a batch or state placed differently is an error, not a recompile.
    return jax.jit(step, in_shardings=in_shardings, out_shardings=out_shardings,
                   donate_argnums=0).lower(target, batch_shape, rate).compile()


_COUNTED: dict[Any, float | None] = {}
"""This process's step counts by what they read (:func:`step_flops`): lowering the unrolled step
again for each run of one shape cost a tiny run about a quarter of its fixed time."""


def step_flops(model_config: Any, config: Any, impl: Impl, target: Any, batch_shape: Any, rate: Any) -> float | None:
    """FLOPs of one step as XLA counts them (its cost analysis of the step, not compiled), for the
    run's summary: the layers unrolled and the softmax in one block, as XLA counts a loop's body
    once; attention and the loss by XLA (attention unmasked), whose costs XLA knows (a kernel's it does not).
    A count is kept for the process's later runs of the same model, optimizer, step and shapes."""
    from levanter.models.layout import unstack_tree

    trainer = config.trainer
    counted = dataclasses.replace(impl, scan_layers=False, attention=Attention.XLA, loss=LossImpl.BLOCKWISE)
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype), unstack_tree(target))
    batch = jax.ShapeDtypeStruct(batch_shape.shape, batch_shape.dtype)
    key = (model_config, counted, config.optimizer, trainer.compute_dtype, config.z_loss_weight, trainer.seq_len,
           jax.tree.structure(abstract), tuple(jax.tree.leaves(abstract)), batch, getattr(rate, "shape", None), str(getattr(rate, "dtype", None)))
    try:
        return _COUNTED[key]
    except KeyError:
        pass
    except TypeError:  # a config that cannot be a key (an unhashable field): counted every time
        key = None
    model = model_config.build(trainer.compute_dtype.jnp, impl=counted)
    step = make_train_step(model, config.optimizer.at_rate, trainer.compute_dtype.jnp, 1,
                           z_loss_weight=config.z_loss_weight, loss_block=trainer.seq_len)
    try:
        analysis = jax.jit(step).lower(abstract, batch, rate).cost_analysis()
    except NotImplementedError:  # a backend without a cost model
        analysis = None
    flops = (analysis or {}).get("flops")
    result = float(flops) if flops else None  # the whole step's: lowered without a mesh
    if key is not None:
        _COUNTED[key] = result
    return result
