"""Adam's moments in less memory: bfloat16 storage, and a factored second moment.

``scale_by_compact_adam`` is ``optax.scale_by_adam`` (same bias correction, same epsilon) with two
options. ``dtype``: the moments are stored in it (bfloat16 halves them) while every update is
computed in float32. ``factored``: the second moment of a matrix ``[..., rows, cols]`` (a stacked
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


def scale_by_compact_adam(b1: float, b2: float, eps: float, dtype: Any = jnp.float32,
                          factored: bool = False) -> optax.GradientTransformation:
    """Adam's scaling with moments stored in ``dtype`` and, with ``factored``, a factored second
    moment of every matrix. With ``dtype`` float32 and no factoring it equals ``optax.scale_by_adam``."""
    store = jnp.dtype(dtype)

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

        def one(g: jax.Array, mu: jax.Array, nu: Any) -> tuple[jax.Array, jax.Array, Any]:
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
                new_nu = v.astype(store)
            step = (mu32 / c1) / (jnp.sqrt(v / c2) + eps)
            return step, mu32.astype(store), new_nu

        is_moment = lambda x: isinstance(x, FactoredMoment)  # noqa: E731 - a leaf test for tree.map
        out = jax.tree.map(one, updates, state.mu, state.nu, is_leaf=is_moment)
        treedef = jax.tree.structure(updates)
        steps, mus, nus = zip(*treedef.flatten_up_to(out), strict=True) if treedef.num_leaves else ((), (), ())
        return (treedef.unflatten(steps),
                CompactAdamState(count=count, mu=treedef.unflatten(mus), nu=treedef.unflatten(nus)))

    return optax.GradientTransformation(init, update)
