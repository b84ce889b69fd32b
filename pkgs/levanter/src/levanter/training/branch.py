"""A run that starts from another run's checkpoint while keeping a differently made state.

A branch (``initialize_from=checkpoint(model, step=N)``) may change what its state holds: add an
average of the parameters (``ema=``) or drop it, store Adam's moments in another dtype, or factor
the second moment or stop factoring it. The checkpoint is read as it was written (its arrays'
metadata says what it holds) and each array of the new state is made from it:

* an array the checkpoint holds under the same name and shape: read, cast to the new dtype
  (a moment's storage);
* a factored second moment from a full one: its row and column means (exactly what factoring
  keeps); a full one from a factored one: their outer product over the rows' mean (what the
  factored optimizer uses in its place);
* an average the checkpoint lacks: the branch point's parameters, holding no update yet (so its
  debiased first update replaces them, ``levanter.ema``); its count, when an average written
  without one continues: the steps trained;
* anything else is a one-line ``ValueError`` naming the array.

Names compare without the positions of an optimizer chain's parts (``optax.adamw``'s nested chain
and the compact moments' flat one hold the same moments), so what the checkpoint holds but the
new state does not (a dropped average, the other form of a moment) is never read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import FlattenedIndexKey, SequenceKey

from levanter.checkpoint import (
    RestoredCheckpoint,
    restore_checkpoint,
    restore_parts,
    saved_arrays,
    saved_per_layer,
)
from levanter.training.execution import HOST

__all__ = ["restore_branch"]

Key = tuple[str, ...]

_ROW, _COL = "row", "col"
"""The fields of a factored second moment (``levanter.optim.moments.FactoredMoment``)."""


def _key(path: Any) -> Key:
    """A leaf's path as names only (a dict key or field; a position in a sequence left out)."""
    return tuple(str(getattr(e, "key", getattr(e, "name", e))) for e in path
                 if not isinstance(e, SequenceKey | FlattenedIndexKey))


def _by_key(tree: Any, what: str) -> dict[Key, tuple[Any, Any]]:
    """``{name: (path, leaf)}`` of ``tree``; ValueError when two leaves share a name."""
    out: dict[Key, tuple[Any, Any]] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        key = _key(path)
        if key in out:
            raise ValueError(f"{what} holds two arrays named {'/'.join(key)}: cannot match them by name")
        out[key] = (path, leaf)
    return out


@dataclasses.dataclass(frozen=True)
class _Source:
    """How one array of the new state is made: ``make`` applied to the checkpoint's arrays ``reads``."""

    reads: tuple[Key, ...]
    make: Callable[..., Any]


def _mean_over(axis: int) -> Callable[[Any], Any]:
    return lambda full: jnp.mean(full.astype(jnp.float32), axis=axis)


def _from_factored(row: Any, col: Any) -> Any:
    mean = jnp.mean(row, axis=-1)[..., None, None]
    product = row[..., :, None] * col[..., None, :]
    return jnp.where(mean > 0, product / jnp.where(mean > 0, mean, 1.0), 0.0)


def _source(key: Key, want: Any, saved: dict[Key, Any], where: str) -> _Source:
    """How the new state's array ``key`` (shape ``want.shape``) is made from the ``saved`` arrays."""
    shape = tuple(want.shape)
    if key in saved and tuple(saved[key].shape) == shape:
        return _Source((key,), lambda x: x)
    full = saved.get(key[:-1])
    if key[-1:] == (_ROW,) and full is not None and tuple(full.shape)[:-1] == shape:
        return _Source((key[:-1],), _mean_over(-1))
    if key[-1:] == (_COL,) and full is not None and len(full.shape) >= 2 \
            and (*full.shape[:-2], full.shape[-1]) == shape:
        return _Source((key[:-1],), _mean_over(-2))
    if (*key, _ROW) in saved and (*key, _COL) in saved:
        return _Source(((*key, _ROW), (*key, _COL)), _from_factored)
    if key[:1] == ("ema",) and not any(k[:1] == ("ema",) for k in saved) and ("params", *key[1:]) in saved:
        return _Source((("params", *key[1:]),), lambda x: x)  # an average added here: the branch point's weights
    if key == ("ema_steps",) and ("step",) in saved:
        # An average added here holds no update yet; one written before it was counted ran from step 0.
        added = not any(k[:1] == ("ema",) for k in saved)
        return _Source((("step",),), (lambda s: jnp.zeros_like(s)) if added else (lambda s: s))
    held = f"shape {tuple(saved[key].shape)}" if key in saved else "none"
    raise ValueError(f"cannot start from {where}: the new state's {'/'.join(key)} {shape} cannot be made from "
                     f"what the checkpoint holds ({held}); start from step 0 or keep the source's settings")


def restore_branch(directory: str, step: int, target: Any) -> RestoredCheckpoint:
    """Checkpoint ``step`` under ``directory`` (another run's) as a state of ``target``'s structure,
    dtypes and placement, made as the module docstring says from what the checkpoint holds.

    Raises:
        FileNotFoundError: there is no committed checkpoint ``step``.
        ValueError: an array of ``target`` cannot be made from the checkpoint (the message names it).
    """
    where = f"{directory}/{step}"
    if saved_per_layer(directory, step):  # written before the layers were stacked: read as it was, then stacked
        return restore_checkpoint(directory, step, target)
    tree = saved_arrays(directory, step)
    saved = {k: leaf for k, (_, leaf) in _by_key(tree, where).items()}
    wanted = _by_key(target, "the new state")
    # The parameters first: when the model differs, they name the cause (their moments would too).
    made = {k: _source(k, wanted[k][1], saved, where) for k in sorted(wanted, key=lambda k: k[:1] != ("params",))}
    sources = {k: made[k] for k in wanted}  # in the state's leaf order
    same = all(s.reads == (k,) and saved[k].dtype == wanted[k][1].dtype for k, s in sources.items())
    if same and len(saved) == len(wanted):
        return restore_checkpoint(directory, step, target)
    read = {k for s in sources.values() for k in s.reads}
    placement = {k: leaf.sharding for k, (_, leaf) in wanted.items()}
    replicated = placement[("step",)]

    def item(path: Any, leaf: Any) -> Any:
        key = _key(path)
        if key not in read:
            return _placeholder()
        shape = tuple(leaf.shape)
        sharding = placement[key] if key in wanted and tuple(wanted[key][1].shape) == shape else replicated
        if sharding.memory_kind == HOST:  # read onto the device; the state's own placement is made on the way out
            sharding = sharding.with_memory_kind("device")
        return jax.ShapeDtypeStruct(shape, np.dtype(leaf.dtype), sharding=sharding)

    restored = restore_parts(directory, step, jax.tree_util.tree_map_with_path(item, tree))
    arrays = {_key(path): leaf for path, leaf in jax.tree_util.tree_leaves_with_path(restored.state)
              if _key(path) in read}

    def build(arrays: dict[Key, Any]) -> Any:
        leaves = [sources[k].make(*(arrays[r] for r in sources[k].reads)).astype(wanted[k][1].dtype)
                  for k in wanted]
        return jax.tree.unflatten(jax.tree.structure(target), leaves)

    shardings = jax.tree.map(lambda t: t.sharding, target)
    state = jax.jit(build, out_shardings=shardings)(arrays)
    return RestoredCheckpoint(step=restored.step, state=state, data_state=restored.data_state)


def _placeholder() -> Any:
    """What a restore item holds for an array not to read (Orbax's placeholder)."""
    import orbax.checkpoint as ocp  # deferred as in levanter.checkpoint: only restores need it

    return ocp.PLACEHOLDER
