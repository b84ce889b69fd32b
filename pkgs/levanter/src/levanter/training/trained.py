"""What a run trains and what it holds fixed: all the model's parameters, or LoRA adapters of frozen weights.

:func:`trained_state` is where a run's state comes from (a restore target and the starting state,
:mod:`levanter.training.start`) for either kind. With LoRA (``TrainLmConfig.lora``) the state's
``params`` are the adapters (so only they are optimised and checkpointed) and the base weights
are ``frozen``: placed on the mesh once and handed to each compiled step as its last argument
(:class:`BoundStep`), never donated, never saved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from levanter.checkpoint import Checkpointer
from levanter.config import TrainLmConfig
from levanter.initialize import initial_params
from levanter.lora import LoraConfig, fold, init_adapters
from levanter.sharding import tree_shardings
from levanter.training.execution import offload_opt_state
from levanter.training.start import Start, starting_state
from levanter.training.state import TrainState, abstract_state

__all__ = ["BoundStep", "Trained", "trained_state"]


@dataclasses.dataclass(frozen=True)
class Trained:
    """A run's restore target and starting state, and the weights it does not train."""

    target: TrainState
    """Shapes, dtypes and shardings of the state (what checkpoints restore into)."""
    start: Start
    frozen: Any = None
    """The frozen base weights on the mesh (LoRA), or None."""
    lora: LoraConfig | None = None

    def model_params(self, trained: Any, frozen: Any) -> Any:
        """The model's parameters from the trained ones (and the frozen ones given to a step)."""
        return trained if self.lora is None else fold(frozen, trained, self.lora.scale)

    @property
    def frozen_shardings(self) -> Any:
        return None if self.frozen is None else jax.tree.map(lambda x: x.sharding, self.frozen)

    def compile(self, fn: Callable[..., Any], in_shardings: tuple[Any, ...], out_shardings: Any,
                args: tuple[Any, ...], donate_argnums: tuple[int, ...] = ()) -> Any:
        """``fn(*args, frozen)`` compiled ahead of time (``frozen`` left out without frozen weights),
        bound to the frozen weights: called with ``args`` alone either way."""
        if self.frozen is None:
            return jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings,
                           donate_argnums=donate_argnums).lower(*args).compile()
        frozen_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), self.frozen)
        compiled = jax.jit(fn, in_shardings=(*in_shardings, self.frozen_shardings), out_shardings=out_shardings,
                           donate_argnums=donate_argnums).lower(*args, frozen_shapes).compile()
        return BoundStep(compiled, self.frozen)


    def jit(self, fn: Callable[..., Any], in_shardings: tuple[Any, ...], out_shardings: Any) -> Callable[..., Any]:
        """``fn(*args, frozen)`` jitted (compiled at its first call), called with ``args`` alone;
        ``frozen`` is None without frozen weights."""
        if self.frozen is None:
            return jax.jit(lambda *args: fn(*args, None), in_shardings=in_shardings, out_shardings=out_shardings)
        return BoundStep(jax.jit(fn, in_shardings=(*in_shardings, self.frozen_shardings), out_shardings=out_shardings),
                         self.frozen)


class BoundStep:
    """A jitted or compiled function with its last argument (the frozen weights) given: called with the others."""

    def __init__(self, compiled: Any, frozen: Any):
        self.compiled = compiled
        self.frozen = frozen

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args, self.frozen)

    def cost_analysis(self) -> Any:
        return self.compiled.cost_analysis()

    def memory_analysis(self) -> Any:
        return self.compiled.memory_analysis()


def trained_state(config: TrainLmConfig, model_config: Any, tx: optax.GradientTransformation, mesh: Any,
                  checkpointer: Checkpointer) -> Trained:
    """The run's target and starting state: its own newest checkpoint, else where ``config`` starts.

    With ``config.lora`` the base is ``trainer.initialize_from``'s weights (vocabulary grown to the
    model's) and fresh adapters start from ``lora.seed``.

    Raises:
        ValueError: a LoRA target matches no weight, or its rank exceeds a weight's smaller side.
    """
    trainer = config.trainer
    if config.lora is None:
        target = _placed(abstract_state(model_config, tx, mesh, trainer.ema is not None), trainer.offload_optimizer)
        return Trained(target=target, start=starting_state(checkpointer, target, model_config, tx, seed=trainer.seed,
                                                           initialize_from=trainer.initialize_from))
    lora, base_from = config.lora, trainer.initialize_from
    if base_from is None:  # TrainLmConfig refuses this; said again for the type checker
        raise ValueError("lora adapts trained weights: give initialize_from")
    units = model_config.sharding_units()
    host_base = initial_params(base_from, model_config)
    base_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.float32), host_base)
    frozen = jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), host_base),
                            tree_shardings(base_shapes, mesh, units=units))

    def init(key: jax.Array) -> TrainState:
        _, key = jax.random.split(key)  # as a full run's init spends its first split on the parameters
        adapters = init_adapters(lora, base_shapes)
        # No average: TrainLmConfig refuses ema= with lora= (an average of A and B is not one of W + s A B).
        return TrainState(step=jnp.zeros((), jnp.int32), params=adapters, opt_state=tx.init(adapters), key=key)

    shapes = jax.eval_shape(init, jax.random.PRNGKey(0))
    shardings = tree_shardings(shapes, mesh, units=units)
    target = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
    target = _placed(target, trainer.offload_optimizer)
    start = starting_state(checkpointer, target, model_config, tx, seed=trainer.seed, initialize_from=None, init=init)
    return Trained(target=target, start=start, frozen=frozen, lora=lora)


def _placed(target: TrainState, offload_optimizer: bool) -> TrainState:
    """``target`` with its optimizer state in host memory when the run keeps it there."""
    return offload_opt_state(target) if offload_optimizer else target
