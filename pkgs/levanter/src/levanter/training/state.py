"""The training state: one typed pytree (step, parameters, optimizer state, PRNG key).

Its pytree paths are those of the dict the state used to be (``['params']['embed']['embeddings']``),
and its leaves come in that dict's order, so checkpoints written before and after it are the same
files (Orbax names arrays by path), sharding rules match the same paths, and the compiled step
takes the same arguments in the same order. A run that keeps an average of its parameters
(``levanter.ema``) has two more children, ``ema`` and ``ema_steps``, first in that order; a state
without one has the same paths and leaves as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.tree_util import DictKey

from levanter.sharding import tree_shardings

__all__ = ["TrainState", "abstract_state", "average_of", "params_initializer", "split_init_key", "state_initializer",
           "state_of_params"]


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything a step reads and writes; a checkpoint saves it whole."""

    step: Any
    """Completed optimizer steps (an int32 scalar array)."""
    params: Any
    """Model parameters, float32 (Haiku's ``{module: {name: array}}``)."""
    opt_state: Any
    """The optimizer's state."""
    key: Any
    """PRNG key of the run."""
    ema: Any = None
    """The exponential moving average of ``params`` (``levanter.ema``), or None when the run keeps none."""
    ema_steps: Any = None
    """Updates the average holds (an int32 scalar; its debiasing counts them), or None without an average."""

    def replace(self, **changes: Any) -> TrainState:
        """A copy with ``changes`` (field name -> value)."""
        return dataclasses.replace(self, **changes)

    def __getitem__(self, name: str) -> Any:
        """``state["params"]``: the state used to be a dict, and code that indexes it keeps working."""
        if name not in _WITH_EMA:
            raise KeyError(f"TrainState has no field {name!r}; fields are {list(_WITH_EMA)}")
        return getattr(self, name)

    @classmethod
    def of(cls, state: TrainState | Mapping[str, Any]) -> TrainState:
        """``state`` as a ``TrainState`` (the dict form ``{"params", "opt_state", "step", "key"}`` too)."""
        if isinstance(state, TrainState):
            return state
        missing = [name for name in _CHILDREN if name not in state]
        if missing:
            raise KeyError(f"training state lacks {missing}; it needs {list(_CHILDREN)}")
        return cls(**{name: state[name] for name in _children(state.get("ema"))})


# Children in the sorted key order of the dict the state was, keyed as that dict's entries.
_CHILDREN = ("key", "opt_state", "params", "step")
_WITH_EMA = ("ema", "ema_steps", *_CHILDREN)


def _children(ema: Any) -> tuple[str, ...]:
    """The state's children: ``ema`` and ``ema_steps`` only when the run keeps an average."""
    return _CHILDREN if ema is None else _WITH_EMA


# Registering a pytree type is part of defining it (as a dataclass decorator would), not a registry
# that dispatches on what was imported. The names of the children are the auxiliary data.
jax.tree_util.register_pytree_with_keys(
    TrainState,
    lambda s: (tuple((DictKey(name), getattr(s, name)) for name in _children(s.ema)), _children(s.ema)),
    lambda names, children: TrainState(**dict(zip(names, children, strict=True))),
    flatten_func=lambda s: (tuple(getattr(s, name) for name in _children(s.ema)), _children(s.ema)),
)


def params_initializer(model_config: Any) -> Callable[[jax.Array], tuple[Any, jax.Array]]:
    """``key -> (params, rest of the key)``: the fresh float32 parameters of
    :func:`state_initializer`, and the key the state keeps."""
    init_model = model_config.build(jnp.float32)

    def init_params(key: jax.Array) -> tuple[Any, jax.Array]:
        init_key, key = split_init_key(key)
        return init_model.init(init_key, jnp.zeros((1, 1), jnp.int32)), key

    return init_params


def split_init_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(the key fresh parameters are drawn with, the key the state keeps)`` of a run's ``PRNGKey(seed)``."""
    init_key, rest = jax.random.split(key)
    return init_key, rest


def average_of(params: Any, ema: bool = True) -> dict[str, Any]:
    """The state's fields of a new average of ``params`` (``ema=``, ``ema_steps=``; both None without
    ``ema``): equal to them, holding no update yet, so its first update replaces them (``levanter.ema``)."""
    if not ema:
        return {"ema": None, "ema_steps": None}
    return {"ema": jax.tree.map(jnp.copy, params), "ema_steps": jnp.zeros((), jnp.int32)}


def state_of_params(tx: optax.GradientTransformation, ema: bool = False) -> Callable[[Any, jax.Array], TrainState]:
    """``(params, key) -> state``: step 0, a fresh optimizer state of ``params`` (and, with ``ema``,
    an average equal to them)."""

    def make(params: Any, key: jax.Array) -> TrainState:
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), key=key,
                          **average_of(params, ema))

    return make


def state_initializer(model_config: Any, tx: optax.GradientTransformation,
                      ema: bool = False) -> Callable[[jax.Array], TrainState]:
    """``key -> state``: fresh float32 parameters of ``model_config`` (a ``ModelConfig``), optimizer
    state, step 0 and the rest of the PRNG key (with ``ema``, an average equal to the parameters).

    The parameters' shapes and values come from the config and the key, never from the length of
    the input the init is traced on: it is traced on one token, so one compiled init serves every
    sequence length and batch size of a model (the same values as an init on a full-length input).
    """
    init_params, make = params_initializer(model_config), state_of_params(tx, ema)

    def init_state(key: jax.Array) -> TrainState:
        return make(*init_params(key))

    return init_state


def abstract_state(model_config: Any, tx: optax.GradientTransformation, mesh: jax.sharding.Mesh,
                   ema: bool = False) -> TrainState:
    """Shapes, dtypes and shardings on ``mesh`` of the training state (a restore target; allocates nothing)."""
    shapes = jax.eval_shape(state_initializer(model_config, tx, ema), jax.random.PRNGKey(0))
    shardings = tree_shardings(shapes, mesh, units=model_config.sharding_units())
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
