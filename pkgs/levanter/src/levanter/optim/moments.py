"""Adam's moments in less memory: bfloat16 storage, and a factored second moment.

``scale_by_compact_adam`` is ``optax.scale_by_adam`` (same bias correction, same epsilon) with two
options. ``dtype``: the moments are stored in it (bfloat16 halves them; rounded stochastically, so
that they track float32 moments) while every update is computed in float32. ``factored``: the second moment of a matrix ``[..., rows, cols]`` (a stacked
layer weight counts its last two axes, per layer) is kept as its row and column means, as Adafactor
does (Shazeer & Stern, 2018), and rebuilt as their outer product over their mean when used: ``rows +
cols`` numbers instead of ``rows x cols``. Vectors keep a full second moment, stacked ones too (a
``[layers, hidden]`` norm scale is ``layers`` vectors, never a matrix: :func:`levanter.optim.layer_axes`),
so a stacked model and its layers one by one take the same steps.

Both change the numbers a run computes (they are part of the optimizer's identity); how much, on
the tutorial model, is measured by ``benchmarks/bench_moments.py``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from levanter.optim import layer_axes

__all__ = ["CompactAdamState", "FactoredMoment", "scale_by_compact_adam"]

_FACTORED_EPS = 1e-30
"""Added to squared gradients before they are averaged: a row or column of zeros stays finite."""


class FactoredMoment(NamedTuple):
    """The second moment of a matrix as the means of its rows and of its columns (float32)."""

    row: jax.Array
    """``[..., rows]``: the mean over each row's columns."""
    col: jax.Array
    """``[..., cols]``: the mean over each column's rows."""


class CompactAdamState(NamedTuple):
    """``count``, then the first and second moments (a second moment is an array or a ``FactoredMoment``)."""

    count: Any
    mu: Any
    nu: Any


def _factors(path: Any, p: Any, factored: bool) -> bool:
    """Whether the leaf ``p`` at ``path`` gets a factored second moment: its own axes (the layer axis of
    a stacked leaf is never a factor) make a matrix of at least two rows and two columns."""
    return factored and p.ndim - layer_axes(path) >= 2 and p.shape[-1] > 1 and p.shape[-2] > 1


def _stochastic_round(x: jax.Array, key: jax.Array) -> jax.Array:
    """``x`` (float32) in bfloat16, rounded up or down with probability by nearness: unbiased, so a
    moment whose change in a step is below half a bfloat16 ulp still moves by it on average (round to
    nearest freezes it). Adds 16 random low bits, then cuts them (a float32's top 16 bits are its
    bfloat16): the magnitude rounds, so the sign needs no care."""
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    noise = jax.random.bits(key, x.shape, jnp.uint32) >> 16
    cut = (bits + noise) & jnp.uint32(0xFFFF0000)
    return jax.lax.bitcast_convert_type(cut, jnp.float32).astype(jnp.bfloat16)


_ROUNDING_SEED = 0x5EED
"""The seed of the rounding noise; each step's key is it folded with the step count, so a run (and
its resume from a checkpoint) rounds the same way every time."""


def scale_by_compact_adam(b1: float, b2: float, eps: float, dtype: Any = jnp.float32,
                          factored: bool = False) -> optax.GradientTransformation:
    """Adam's scaling with moments stored in ``dtype`` and, with ``factored``, a factored second
    moment of every matrix. With ``dtype`` float32 and no factoring it equals ``optax.scale_by_adam``.

    Moments stored in bfloat16 are rounded stochastically (:func:`_stochastic_round`; the key of leaf
    ``i`` at step ``t`` is the seed folded with ``t``, then ``i``): they track float32 moments where
    rounding to nearest would freeze, e.g. a second moment with ``b2`` 0.999 once ``(1 - b2) g^2`` is
    below half an ulp of it."""
    store = jnp.dtype(dtype)
    stochastic = store == jnp.dtype(jnp.bfloat16)

    def init(params: Any) -> CompactAdamState:
        mu = jax.tree.map(lambda p: jnp.zeros(p.shape, store), params)

        def second(path: Any, p: Any) -> Any:
            if _factors(path, p, factored):
                return FactoredMoment(jnp.zeros(p.shape[:-1], jnp.float32),
                                      jnp.zeros((*p.shape[:-2], p.shape[-1]), jnp.float32))
            return jnp.zeros(p.shape, store)

        return CompactAdamState(count=jnp.zeros((), jnp.int32), mu=mu, nu=jax.tree_util.tree_map_with_path(second, params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        count = optax.safe_increment(state.count)
        c1 = 1.0 - jnp.asarray(b1, jnp.float32) ** count
        c2 = 1.0 - jnp.asarray(b2, jnp.float32) ** count
        step_key = jax.random.fold_in(jax.random.PRNGKey(_ROUNDING_SEED), count)

        def stored(x: jax.Array, key: jax.Array) -> jax.Array:
            return _stochastic_round(x, key) if stochastic else x.astype(store)

        def one(index: int, g: jax.Array, mu: jax.Array, nu: Any) -> tuple[jax.Array, jax.Array, Any]:
            mu_key, nu_key = jax.random.split(jax.random.fold_in(step_key, index))
            g = g.astype(jnp.float32)
            mu32 = b1 * mu.astype(jnp.float32) + (1.0 - b1) * g
            if isinstance(nu, FactoredMoment):
                g2 = g * g + _FACTORED_EPS
                row = b2 * nu.row + (1.0 - b2) * jnp.mean(g2, axis=-1)
                col = b2 * nu.col + (1.0 - b2) * jnp.mean(g2, axis=-2)
                v = row[..., :, None] * col[..., None, :] / jnp.mean(row, axis=-1)[..., None, None]
                new_nu: Any = FactoredMoment(row, col)
            else:
                v = b2 * nu.astype(jnp.float32) + (1.0 - b2) * g * g
                new_nu = stored(v, nu_key)
            step = (mu32 / c1) / (jnp.sqrt(v / c2) + eps)
            return step, stored(mu32, mu_key), new_nu

        treedef = jax.tree.structure(updates)
        is_moment = lambda x: isinstance(x, FactoredMoment)  # noqa: E731 - a leaf test for flatten_up_to
        out = [one(i, g, m, n) for i, (g, m, n) in enumerate(zip(
            treedef.flatten_up_to(updates), treedef.flatten_up_to(state.mu),
            jax.tree.flatten(state.nu, is_leaf=is_moment)[0], strict=True))]
        steps, mus, nus = zip(*out, strict=True) if out else ((), (), ())
        return (treedef.unflatten(steps),
                CompactAdamState(count=count, mu=treedef.unflatten(mus), nu=treedef.unflatten(nus)))

    return optax.GradientTransformation(init, update)
