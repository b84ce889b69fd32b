"""One optimizer step, with gradient accumulation over micro-batches."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from levanter.optim import learning_rate
from levanter.training.loss import objective_terms
from levanter.training.state import TrainState

__all__ = ["make_train_step"]


def make_train_step(model: Any, tx: optax.GradientTransformation | Callable[[jax.Array], optax.GradientTransformation],
                    compute_dtype: jnp.dtype, grad_accum: int, batch_sharding: NamedSharding | None = None,
                    z_loss_weight: float = 0.0, *, loss_block: int | None = None,
                    opt_state_device: Any = None,
                    grad_dtype: Any = jnp.float32) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The un-jitted step ``(state, batch) -> (state, metrics)`` of ``model`` (a Haiku ``Transformed``).

    When ``tx`` is ``rate -> transformation`` (``AdamConfig.at_rate``) rather than a transformation,
    the step is ``(state, batch, rate)``: the learning rate of the step comes in as an argument (the trainer
    computes it with ``AdamConfig.rate_of_step``), so the compiled program holds no schedule and one
    program serves every schedule, peak rate and run length of the same model and batch.

    ``state`` is a :class:`TrainState` (or its dict form). With ``grad_accum > 1`` the batch is
    split into micro-batches whose gradients are averaged (a scan, so memory holds one micro-batch
    of activations); row ``r`` goes to micro-batch ``r % grad_accum`` so each device keeps its rows.
    Metrics: ``loss`` is the cross entropy (comparable to the validation loss), ``z_loss`` the
    weighted z-loss term when there is one, ``lr`` the rate the optimizer just applied,
    ``grad_norm`` the global norm of the (averaged) gradient. ``loss_block`` is the output softmax's
    positions per block (``levanter.ops.cross_entropy``; None: chosen from the shapes).
    ``opt_state_device``: the device shardings of an optimizer state kept in host memory between
    steps; it is brought there for the update (the step's outputs say where it goes back).
    ``grad_dtype`` bfloat16 differentiates with respect to the parameters cast to it: the gradients
    are held in half the memory (rounded to bfloat16; the update is still computed in float32).
    """
    def objective(params: Any, batch: jax.Array) -> tuple[jax.Array, jax.Array]:
        # ce rides along as aux: only the total is differentiated, so its gradient comes from the
        # loss's own pass over the blocks.
        total, ce, _ = objective_terms(model, params, batch, compute_dtype, z_loss_weight, block=loss_block)
        return total, ce

    value_and_grad = jax.value_and_grad(objective, has_aux=True)
    low = jnp.dtype(grad_dtype) != jnp.dtype(jnp.float32)

    def grad_fn(params: Any, batch: jax.Array) -> tuple[tuple[jax.Array, jax.Array], Any]:
        if not low:
            return value_and_grad(params, batch)
        cast = jax.tree.map(lambda p: p.astype(grad_dtype) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
        return value_and_grad(cast, batch)
    if isinstance(tx, optax.GradientTransformation):
        fixed = tx
        rate_given, transformation_at = False, lambda _rate: fixed
    else:
        rate_given, transformation_at = True, tx

    def accumulated(params: Any, batch: jax.Array) -> tuple[tuple[jax.Array, jax.Array], Any]:
        micro = batch.reshape(batch.shape[0] // grad_accum, grad_accum, *batch.shape[1:]).swapaxes(0, 1)
        if batch_sharding is not None:
            micro = jax.lax.with_sharding_constraint(
                micro, NamedSharding(batch_sharding.mesh, P(None, *batch_sharding.spec)))

        def body(carry: Any, mb: jax.Array) -> tuple[Any, None]:
            total_sum, loss_sum, grad_sum = carry
            (total_i, loss_i), grads_i = grad_fn(params, mb)
            return (total_sum + total_i, loss_sum + loss_i, jax.tree.map(jnp.add, grad_sum, grads_i)), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        zero = jnp.zeros((), jnp.float32)
        (total_sum, loss_sum, grad_sum), _ = jax.lax.scan(body, (zero, zero, zeros), micro)
        return (total_sum / grad_accum, loss_sum / grad_accum), jax.tree.map(lambda g: g / grad_accum, grad_sum)

    def step(state: TrainState | Mapping[str, Any], batch: jax.Array,
             rate: jax.Array | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
        if rate_given == (rate is None):
            raise TypeError("a step made with rate -> transformation takes a rate; one made with a transformation does not")
        state = TrainState.of(state)
        params = state.params
        (total, loss), grads = grad_fn(params, batch) if grad_accum == 1 else accumulated(params, batch)
        opt_state = state.opt_state
        if opt_state_device is not None:
            opt_state = jax.device_put(opt_state, opt_state_device)
        updates, opt_state = transformation_at(rate).update(grads, opt_state, params)
        new_state = state.replace(params=optax.apply_updates(params, updates), opt_state=opt_state,
                                  step=state.step + 1)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": learning_rate(opt_state)}
        if z_loss_weight:
            metrics["z_loss"] = total - loss
        return new_state, metrics

    return step
