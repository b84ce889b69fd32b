"""The two layouts of a Llama's layer weights, and the conversion between them.

Stacked (what the model uses, saves and restores): one entry per kind of layer weight under
``layers/`` with the layers on a leading axis (``params["layers/attn/q_proj"]["w"]`` is
``[num_layers, hidden, heads * head_dim]``), so the layers run as one ``jax.lax.scan``.

Per layer (what checkpoints, ``final/params.npz`` files and trees written before the stacking
hold): ``layer_<i>/attn/q_proj`` and so on. Readers convert such trees on read
(:func:`stack_tree`); the Hugging Face export writes one tensor per layer (``unstack_layers``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LAYERS", "is_per_layer", "stack_layers", "stack_tree", "unstack_layers", "unstack_tree"]

LAYERS = "layers"
"""Module prefix of the stacked layer weights."""

_PER_LAYER = re.compile(r"^layer_(\d+)/(.+)$")
_STACKED = re.compile(rf"^{LAYERS}/(.+)$")


def is_per_layer(params: Mapping[str, Any]) -> bool:
    """Whether the ``{module: {name: array}}`` mapping ``params`` holds per-layer modules (``layer_<i>/...``)."""
    return any(isinstance(k, str) and _PER_LAYER.match(k) for k in params)


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _stack(values: list[Any]) -> Any:
    """Stack arrays on a new leading axis (numpy stays numpy); non-arrays (optax's masked-out
    placeholders, abstract shapes) are taken from the first layer, or stacked as shapes."""
    first = values[0]
    if not _is_array(first):
        return first
    if type(first).__name__ == "ShapeDtypeStruct":
        import jax

        return jax.ShapeDtypeStruct((len(values), *first.shape), first.dtype)
    if all(type(v).__module__ == "numpy" for v in values):
        import numpy as np

        return np.stack(values)
    import jax.numpy as jnp

    return jnp.stack(values)


def stack_layers(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with its ``layer_<i>/<module>`` entries replaced by ``layers/<module>`` (stacked
    in layer order); other entries kept as they are.

    Raises:
        ValueError: the layers do not run 0..n-1, or a layer lacks a module or name the others have.
    """
    layers: dict[int, dict[str, Mapping[str, Any]]] = {}
    out: dict[str, Any] = {}
    for module, names in params.items():
        match = _PER_LAYER.match(module) if isinstance(module, str) else None
        if match is None:
            out[module] = names
        else:
            layers.setdefault(int(match.group(1)), {})[match.group(2)] = names
    if not layers:
        return out
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"per-layer parameters must be layers 0..{len(layers) - 1}, got layers {sorted(layers)}")
    modules = layers[0]
    for i, layer in layers.items():
        if set(layer) != set(modules) or any(set(layer[m]) != set(modules[m]) for m in modules):
            raise ValueError(f"layer_{i} holds {sorted(layer)}, layer_0 holds {sorted(modules)}: not one layer shape")
    for module, names in modules.items():
        out[f"{LAYERS}/{module}"] = {name: _stack([layers[i][module][name] for i in range(len(layers))])
                                    for name in names}
    return out


def unstack_layers(params: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`stack_layers`: ``layers/<module>`` entries become ``layer_<i>/<module>``."""
    out: dict[str, Any] = {}
    for module, names in params.items():
        match = _STACKED.match(module) if isinstance(module, str) else None
        if match is None:
            out[module] = names
            continue
        counts = {_leading(v) for v in names.values() if _is_array(v)}
        if len(counts) != 1:
            raise ValueError(f"{module}: its arrays do not share one leading (layer) axis")
        (count,) = counts
        for i in range(count):
            out[f"layer_{i}/{match.group(1)}"] = {name: _slice(v, i) for name, v in names.items()}
    return out


def _leading(x: Any) -> int:
    return int(x.shape[0])


def _slice(x: Any, i: int) -> Any:
    if not _is_array(x):
        return x
    if type(x).__name__ == "ShapeDtypeStruct":
        import jax

        sharding = getattr(x, "sharding", None)
        if sharding is not None and hasattr(sharding, "spec"):
            from jax.sharding import NamedSharding, PartitionSpec

            sharding = NamedSharding(sharding.mesh, PartitionSpec(*tuple(sharding.spec)[1:]))
        return jax.ShapeDtypeStruct(tuple(x.shape[1:]), x.dtype, sharding=sharding)
    return x[i]


def _map_mappings(tree: Any, fn: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Any:
    """``tree`` with ``fn`` applied to every ``{module: {name: ...}}`` mapping in it (training
    states, optax states: dicts, lists, tuples and named tuples, and dataclass-like pytrees)."""
    if isinstance(tree, Mapping):
        if tree and all(isinstance(k, str) for k in tree) and (is_per_layer(tree) or any(
                isinstance(k, str) and _STACKED.match(k) for k in tree)):
            return fn(tree)
        return type(tree)((k, _map_mappings(v, fn)) for k, v in tree.items()) if isinstance(tree, dict) else \
            {k: _map_mappings(v, fn) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_map_mappings(v, fn) for v in tree))
    if isinstance(tree, list | tuple):
        return type(tree)(_map_mappings(v, fn) for v in tree)
    replace = getattr(tree, "replace", None)
    fields = getattr(tree, "__dataclass_fields__", None)
    if callable(replace) and fields:
        return replace(**{name: _map_mappings(getattr(tree, name), fn) for name in fields})
    return tree


def stack_tree(tree: Any) -> Any:
    """``tree`` (a training state, an optimizer state, parameters) with every per-layer parameter
    mapping in it stacked (:func:`stack_layers`); trees already stacked come back unchanged."""
    return _map_mappings(tree, lambda m: stack_layers(m) if is_per_layer(m) else dict(m))


def unstack_tree(tree: Any) -> Any:
    """Inverse of :func:`stack_tree` (abstract ``ShapeDtypeStruct`` leaves too, shardings sliced)."""
    return _map_mappings(tree, unstack_layers)
