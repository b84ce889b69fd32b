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
from levanter.training.loss import objective_terms, target_weight
from levanter.training.state import TrainState

__all__ = ["WEIGHT", "Objective", "lm_objective", "make_train_step"]

Objective = Callable[[Any, Any, Any], tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]]
"""``(params, batch, frozen) -> (what is differentiated, (loss, other metrics))``: the loss a step
minimises. ``frozen`` is what the step is given besides the state and is not trained (the base
weights of LoRA adapters; None when there is none). Metrics are means over the batch."""

WEIGHT = "_weight"
"""The key of an objective's metrics that, when present, holds what its means are over (a float32
scalar: the weight of the batch's targets). Micro-batches of a step are combined in proportion to it,
so ``grad_accum`` micro-batches give the mean of the whole batch; an objective without it (a mean over
rows) has its micro-batches weigh the same. It is not logged."""


def lm_objective(model: Any, compute_dtype: jnp.dtype, z_loss_weight: float = 0.0, *, loss_block: int | None = None,
                 params_of: Callable[[Any, Any], Any] | None = None) -> Objective:
    """Next-token cross entropy (plus the weighted z-loss) of ``model``; ``params_of(trained, frozen)``
    makes the model's parameters from the trained ones (LoRA: the base with the adapters folded in).

    Its means are over the batch's targets (weighted by a chat window's loss mask), a weight it
    gives as ``WEIGHT``: accumulated micro-batches then count each target once, as the whole batch does."""
    def objective(params: Any, batch: Any, frozen: Any) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
        full = params if params_of is None else params_of(params, frozen)
        # ce rides along as aux: only the total is differentiated, so its gradient comes from the
        # loss's own pass over the blocks.
        total, ce, _ = objective_terms(model, full, batch, compute_dtype, z_loss_weight, block=loss_block)
        metrics = {"z_loss": total - ce} if z_loss_weight else {}
        return total, (ce, {**metrics, WEIGHT: target_weight(batch)})

    return objective


def _without_weight(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """An objective's metrics but ``WEIGHT`` (what they are means over is not a metric)."""
    return {k: v for k, v in metrics.items() if k != WEIGHT}


_GradFn = Callable[[Any, Any, Any], tuple[tuple[jax.Array, Any], Any]]


def _gradient_fn(objective: Objective, grad_dtype: Any) -> _GradFn:
    """``(params, batch, frozen) -> ((total, aux), grads)`` of ``objective``; with a ``grad_dtype``
    below float32 the parameters are cast to it first (gradients held in that dtype)."""
    value_and_grad = jax.value_and_grad(objective, has_aux=True)
    if jnp.dtype(grad_dtype) == jnp.dtype(jnp.float32):
        return value_and_grad

    def grad_fn(params: Any, batch: Any, frozen: Any) -> tuple[tuple[jax.Array, Any], Any]:
        cast = jax.tree.map(lambda p: p.astype(grad_dtype) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
        return value_and_grad(cast, batch, frozen)

    return grad_fn


def _accumulated_gradient_fn(grad_fn: _GradFn, grad_accum: int, batch_sharding: NamedSharding | None) -> _GradFn:
    """``grad_fn`` over ``grad_accum`` micro-batches (a scan; row ``r`` in micro-batch ``r % grad_accum``,
    so each device keeps its rows), combined as the whole batch's mean.

    Micro-batch ``i``'s means (loss, metrics, gradient) are over its weight ``w_i`` (``WEIGHT``; 1
    when the objective gives none), floored at 1 as the loss floors its divisor: they are summed
    scaled by ``max(w_i, 1)`` and divided by ``max(sum w_i, 1)``, which is the whole batch's mean.
    The scales are taken relative to the first micro-batch's: with equal weights (ids without a loss
    mask, a loss that is a mean over rows) each is exactly 1 and the result is the plain mean of the
    micro-batches' means (the same numbers within float32 rounding: XLA fuses the scaled sum's
    matmuls differently, as it does for a change of mesh).
    """

    def split(x: jax.Array) -> jax.Array:
        micro = x.reshape(x.shape[0] // grad_accum, grad_accum, *x.shape[1:]).swapaxes(0, 1)
        if batch_sharding is None:
            return micro
        return jax.lax.with_sharding_constraint(micro, NamedSharding(batch_sharding.mesh, P(None, *batch_sharding.spec)))

    def accumulated(params: Any, batch: Any, frozen: Any) -> tuple[tuple[jax.Array, Any], Any]:
        micro = jax.tree.map(split, batch)

        def body(carry: Any, mb: Any) -> tuple[Any, None]:
            sums, weight_sum, first = carry
            (total_i, (loss_i, metrics_i)), grads_i = grad_fn(params, mb, frozen)
            weight = jnp.maximum(jnp.asarray(metrics_i.get(WEIGHT, 1.0), jnp.float32), 0.0)
            metrics_i = _without_weight(metrics_i)
            first = jnp.where(first > 0, first, jnp.maximum(weight, 1.0))
            scale = jnp.maximum(weight, 1.0) / first
            scaled = jax.tree.map(lambda x: scale * x, (total_i, (loss_i, metrics_i), grads_i))
            return (jax.tree.map(jnp.add, sums, scaled), weight_sum + weight, first), None

        def without_weight(out: Any) -> Any:
            (total, (loss, metrics)), grads = out
            return total, (loss, _without_weight(metrics)), grads

        shapes = jax.eval_shape(lambda: without_weight(grad_fn(params, jax.tree.map(lambda m: m[0], micro), frozen)))
        zero = jnp.zeros((), jnp.float32)
        sums = jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes)
        (summed, weight_sum, first), _ = jax.lax.scan(body, (sums, zero, zero), micro)
        # sum_i (max(w_i, 1) / first) x_i / (max(W, 1) / first): the whole batch's mean of x.
        divisor = jnp.maximum(weight_sum, 1.0) / first
        total, aux, grads = jax.tree.map(lambda x: x / divisor, summed)
        return (total, aux), grads

    return accumulated


def make_train_step(model: Any, tx: optax.GradientTransformation | Callable[[jax.Array], optax.GradientTransformation],
                    compute_dtype: jnp.dtype, grad_accum: int, batch_sharding: NamedSharding | None = None,
                    z_loss_weight: float = 0.0, *, loss_block: int | None = None,
                    opt_state_device: Any = None, grad_dtype: Any = jnp.float32, objective: Objective | None = None) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The un-jitted step ``(state, batch) -> (state, metrics)`` of ``model`` (a Haiku ``Transformed``).

    When ``tx`` is ``rate -> transformation`` (``AdamConfig.at_rate``) rather than a transformation,
    the step is ``(state, batch, rate)``: the learning rate of the step comes in as an argument (the trainer
    computes it with ``AdamConfig.rate_of_step``), so the compiled program holds no schedule and one
    program serves every schedule, peak rate and run length of the same model and batch.

    ``state`` is a :class:`TrainState` (or its dict form). With ``grad_accum > 1`` the batch is
    split into micro-batches whose gradients are combined as the whole batch's (a scan, so memory holds
    one micro-batch of activations; each micro-batch weighs what its targets weigh, ``WEIGHT``, so
    ``grad_accum`` and a split over the mesh do not change the objective); row ``r`` goes to
    micro-batch ``r % grad_accum`` so each device keeps its rows.
    Metrics: ``loss`` is the cross entropy (comparable to the validation loss), ``z_loss`` the
    weighted z-loss term when there is one, ``lr`` the rate the optimizer just applied,
    ``grad_norm`` the global norm of the (averaged) gradient. ``loss_block`` is the output softmax's
    positions per block (``levanter.ops.cross_entropy``; None: chosen from the shapes).
    ``opt_state_device``: the device shardings of an optimizer state kept in host memory between
    steps; it is brought there for the update (the step's outputs say where it goes back).
    ``grad_dtype`` bfloat16 differentiates with respect to the parameters cast to it: the gradients
    are held in half the memory (rounded to bfloat16; the update is still computed in float32).

    ``objective`` replaces that loss (a preference loss, or the loss of adapters over frozen
    weights); its other metrics join the step's, and its ``frozen`` argument is the step's optional
    last one: ``(state, batch, rate, frozen)``. The batch may be any pytree of arrays with the
    batch as their first dimension. An average of the parameters is kept by wrapping the step
    (``levanter.ema.averaged_step``).
    """
    if objective is None:
        objective = lm_objective(model, compute_dtype, z_loss_weight, loss_block=loss_block)
    grad_fn = _gradient_fn(objective, grad_dtype)
    transformation_at: Callable[[Any], optax.GradientTransformation]
    if isinstance(tx, optax.GradientTransformation):
        fixed = tx
        rate_given, transformation_at = False, lambda _rate: fixed
    else:
        rate_given, transformation_at = True, tx

    accumulated = _accumulated_gradient_fn(grad_fn, grad_accum, batch_sharding)

    def step(state: TrainState | Mapping[str, Any], batch: Any, rate: jax.Array | None = None,
             frozen: Any = None) -> tuple[TrainState, dict[str, jax.Array]]:
        if rate_given == (rate is None):
            raise TypeError("a step made with rate -> transformation takes a rate; one made with a transformation does not")
        state = TrainState.of(state)
        params = state.params
        (_total, (loss, extra)), grads = (grad_fn(params, batch, frozen) if grad_accum == 1
                                          else accumulated(params, batch, frozen))
        extra = _without_weight(extra)
        opt_state = state.opt_state
        if opt_state_device is not None:
            opt_state = jax.device_put(opt_state, opt_state_device)
        updates, opt_state = transformation_at(rate).update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        new_state = state.replace(params=new_params, opt_state=opt_state, step=state.step + 1)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": learning_rate(opt_state), **extra}
        return new_state, metrics

    return step
