"""Where a run's state comes from: its own newest checkpoint, another run's checkpoint, given weights, or a fresh init."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from levanter.checkpoint import Checkpointer, restore_checkpoint
from levanter.initialize import CheckpointStart, HfCheckpoint, InitializeFrom, TrainedModel, initial_params
from levanter.training.state import TrainState, state_initializer

__all__ = ["Start", "starting_state"]

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
    # Another run's checkpoint (a branch or an extension) is restored whole, like a resume.
    source = initialize_from if restored is None and isinstance(initialize_from, CheckpointStart) else None
    if source is not None:
        restored = restore_checkpoint(str(source.checkpoint_path), source.step, target)
        logger.info("starting from step %d of %s", source.step, source.checkpoint_path)
    if restored is not None:
        logger.info("resuming from checkpoint step %d", restored.step)
        data_state = None if source is not None and source.reset_data_loader else restored.data_state
        return Start(state=TrainState.of(restored.state), step=restored.step, data_state=data_state, source=source)
    shardings = jax.tree.map(lambda s: s.sharding, target)
    ema = target.ema is not None
    make = init if init is not None else state_initializer(model_config, tx, ema)
    state = jax.jit(make, out_shardings=shardings)(jax.random.PRNGKey(seed))
    if init is None and isinstance(initialize_from, HfCheckpoint | TrainedModel):
        params = initial_params(initialize_from, model_config)

        def start_from(p: Any, s: TrainState) -> TrainState:
            return s.replace(params=p, opt_state=tx.init(p), ema=jax.tree.map(jnp.copy, p) if ema else None)

        state = jax.jit(start_from, out_shardings=shardings)(params, state)
        logger.info("initialised from %s", initialize_from)
    return Start(state=state, step=0, data_state=None, source=None)
