"""Where a run's state comes from: its own newest checkpoint, another run's checkpoint, given weights, or a fresh init."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax

from levanter.checkpoint import Checkpointer
from levanter.initialize import CheckpointStart, HfCheckpoint, InitializeFrom, TrainedModel, initial_params
from levanter.training.branch import restore_branch
from levanter.training.state import TrainState, params_initializer, split_init_key, state_of_params

__all__ = ["Start", "fresh_state", "host_cpu", "starting_state"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Start:
    """The state a run begins from."""

    state: TrainState
    """On the run's mesh."""
    step: int
    """Steps already trained (0 for a fresh start)."""
    data_state: dict | None
    """The input position to resume at (None: the beginning)."""
    source: CheckpointStart | None
    """Another run's checkpoint this run starts from (None: its own, or none)."""


def starting_state(checkpointer: Checkpointer, target: TrainState, model_config: Any, tx: optax.GradientTransformation,
                   *, seed: int, initialize_from: InitializeFrom | None,
                   init: Callable[[jax.Array], TrainState] | None = None) -> Start:
    """The run's own newest checkpoint; else ``initialize_from``'s checkpoint; else a fresh init from ``seed``
    (with ``initialize_from``'s parameters, when it names weights, and a fresh optimizer state).
    ``init`` (``key -> state``) makes the fresh state instead of ``model_config``'s initializer
    (LoRA adapters); an average (``target.ema``) starts at the starting parameters.

    ``target`` is :func:`~levanter.training.state.abstract_state` on the run's mesh: every state is
    placed as it says, whatever mesh saved it, and a fresh one is created already split (no device
    ever holds the whole model).
    """
    # Restored onto this run's mesh, whatever mesh saved it.
    restored = checkpointer.restore_latest(target)
    # Another run's checkpoint (a branch or an extension) is restored whole, like a resume, and made
    # into this run's state where that holds more, less or differently stored (levanter.training.branch).
    source = initialize_from if restored is None and isinstance(initialize_from, CheckpointStart) else None
    if source is not None:
        restored = restore_branch(str(source.checkpoint_path), source.step, target)
        logger.info("starting from step %d of %s", source.step, source.checkpoint_path)
    if restored is not None:
        logger.info("resuming from checkpoint step %d", restored.step)
        data_state = None if source is not None and source.reset_data_loader else restored.data_state
        return Start(state=TrainState.of(restored.state), step=restored.step, data_state=data_state, source=source)
    shardings = jax.tree.map(lambda s: s.sharding, target)
    ema = target.ema is not None
    if init is not None:
        state = jax.jit(init, out_shardings=shardings)(jax.random.PRNGKey(seed))
    elif isinstance(initialize_from, HfCheckpoint | TrainedModel):
        # The state a fresh start from ``seed`` would have, with these weights: its key, step 0 and a
        # fresh optimizer state of them. No parameters are drawn only to be replaced (their program
        # is most of a short fine-tune's start on a CPU).
        params = initial_params(initialize_from, model_config)
        _, key = split_init_key(jax.random.PRNGKey(seed))
        state = jax.jit(state_of_params(tx, ema), out_shardings=shardings)(params, key)
        logger.info("initialised from %s", initialize_from)
    else:
        state = fresh_state(model_config, tx, seed, shardings, ema=ema, host=host_cpu(shardings))
    return Start(state=state, step=0, data_state=None, source=None)


def host_cpu(shardings: Any) -> Any:
    """The CPU that makes a run's fresh parameters when the run's devices are accelerators (None:
    they are CPUs, or JAX was told to leave its CPU backend out)."""
    devices = next(iter(jax.tree.leaves(shardings))).device_set
    if all(d.platform == "cpu" for d in devices):
        return None
    try:
        return jax.local_devices(backend="cpu")[0]
    except RuntimeError:
        return None


def fresh_state(model_config: Any, tx: optax.GradientTransformation, seed: int, shardings: Any, *, ema: bool = False,
                host: Any = None) -> TrainState:
    """A fresh state of ``model_config`` from ``seed``, placed as ``shardings`` (a ``TrainState`` of
    shardings) say.

    With ``host`` (a CPU device) the parameters are drawn there and each device is sent its shards.
    The init draws every weight with a random op of its own, unrolled over the layers, and a TPU's
    compiler takes about a second for each (the fresh start of ``llama_150m`` spent 73 s compiling
    its init on a v5e, against 9 s for its training step), a CPU's a small part of that. The values
    are the CPU's, so a run starts from the same weights on every platform. The host holds the
    float32 parameters once (4 bytes a parameter); the optimizer state is made on the devices.

    Without one (the devices are CPUs) the parameters are drawn the same way, in a program apart
    from the optimizer state's: the costly program then depends on the model alone, so runs of one
    model that differ in their optimizer or average share its compilation (a sweep, a fine-tune).
    """
    with contextlib.nullcontext() if host is None else jax.default_device(host):
        params, key = jax.jit(params_initializer(model_config))(jax.random.PRNGKey(seed))
    placed = (params, key) if host is None else jax.tree.map(_from_host, (params, key), (shardings.params, shardings.key))
    del params, key
    return jax.jit(state_of_params(tx, ema), out_shardings=shardings, donate_argnums=0)(*placed)


def _from_host(value: jax.Array, sharding: Any) -> jax.Array:
    """``value`` (a whole array on the host) as an array of ``sharding``: each device gets its shard
    (every process made the same value, so this holds on many hosts too)."""
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
