"""Where arrays live on a device mesh: the mesh config and the one table of parameter sharding rules.

The mesh has three axes, outermost first:

* ``data``: replicas; each holds the whole (unsharded by this axis) model and its own rows of the batch.
* ``fsdp``: parameters and optimizer state are split over it (the ``embed`` dimension of every
  matrix); the batch is split over it too, so each step all-gathers weights, not activations.
* ``tensor``: attention heads and the MLP's inner dimension (and the vocabulary) are split over it.

The batch is split over ``data`` x ``fsdp``. :class:`MeshConfig` and :func:`param_spec` need no JAX
(specs come from shapes and axis sizes alone); importing this module never imports JAX.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from levanter.lora import LORA_A, LORA_B
from levanter.models.layout import LAYERS

__all__ = [
    "AXES",
    "BATCH_AXES",
    "MeshConfig",
    "activation_sharder",
    "batch_spec",
    "make_mesh",
    "param_spec",
    "process_rows",
    "shard_bytes",
    "tree_shardings",
]

AXES = ("data", "fsdp", "tensor")
"""Mesh axis names, outermost first (``tensor`` innermost: its collectives are the most frequent)."""

BATCH_AXES = ("data", "fsdp")
"""The mesh axes the batch dimension is split over."""


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the mesh axes; one of them may be -1 (whatever the devices leave over)."""

    data: int = -1
    """Replicas (batch split over them, parameters whole)."""
    fsdp: int = 1
    """Parameter and optimizer-state shards (batch split over them as well)."""
    tensor: int = 1
    """Tensor-parallel shards of attention heads, MLP inner dimension and vocabulary."""

    def __post_init__(self) -> None:
        for name in AXES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or (value < 1 and value != -1):
                raise ValueError(f"mesh {name} must be a positive int or -1 (inferred), got {value!r}")
        inferred = [name for name in AXES if getattr(self, name) == -1]
        if len(inferred) > 1:
            raise ValueError(f"at most one mesh axis may be -1 (inferred), got {inferred}")

    def sizes(self, num_devices: int) -> dict[str, int]:
        """Each axis's size on ``num_devices`` devices, with the -1 axis filled in.

        Raises:
            ValueError: the sizes do not multiply to ``num_devices``.
        """
        given = {name: getattr(self, name) for name in AXES}
        known = math.prod(v for v in given.values() if v != -1)
        for name, value in given.items():
            if value == -1:
                if num_devices % known:
                    raise ValueError(f"mesh {self.describe()} does not fit {num_devices} devices: "
                                     f"{num_devices} is not divisible by {known}")
                given[name] = num_devices // known
        if math.prod(given.values()) != num_devices:
            raise ValueError(f"mesh {self.describe()} needs {math.prod(given.values())} devices, "
                             f"but there are {num_devices}")
        return given

    def describe(self) -> str:
        """``data=-1 fsdp=4 tensor=2``."""
        return " ".join(f"{name}={getattr(self, name)}" for name in AXES)


def make_mesh(config: MeshConfig, devices: Sequence[Any] | None = None) -> Any:
    """The ``jax.sharding.Mesh`` of ``devices`` (default: all devices of every process).

    On TPU ``mesh_utils`` lays the axes along the physical torus; elsewhere devices go in
    process-major order. Either way each process's devices form a contiguous block of the batch.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = list(jax.devices() if devices is None else devices)
    sizes = config.sizes(len(devices))
    shape = tuple(sizes[name] for name in AXES)
    if devices[0].platform == "tpu":
        from jax.experimental import mesh_utils

        grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    else:
        grid = np.asarray(sorted(devices, key=lambda d: (d.process_index, d.id)), dtype=object).reshape(shape)
    return Mesh(grid, AXES)


# --------------------------------------------------------------------------- the rules

# Logical axes of each parameter, by (module name, parameter name); one entry per array dimension.
# Modules are matched on the last component of the Haiku module path ("layer_3/attn/q_proj" -> "q_proj").
_RULES: dict[tuple[str, str], tuple[str | None, ...]] = {
    ("embed", "embeddings"): ("vocab", "embed"),
    ("q_proj", "w"): ("embed", "heads"),
    ("k_proj", "w"): ("embed", "kv_heads"),
    ("v_proj", "w"): ("embed", "kv_heads"),
    ("o_proj", "w"): ("heads", "embed"),
    ("gate_proj", "w"): ("embed", "mlp"),
    ("up_proj", "w"): ("embed", "mlp"),
    ("down_proj", "w"): ("mlp", "embed"),
    ("lm_head", "w"): ("embed", "vocab"),
}
# The two factors of a LoRA adapter of a weight ``w`` ([..., in, rank] and [..., rank, out]).
_LORA_FACTORS = (LORA_A, LORA_B)
# Stacked layer weights: one module path per kind of layer weight, the layers on a leading axis.
_STACKED_PREFIX = f"{LAYERS}/"
# RMSNorm scales: replicated (a few kilobytes; splitting them would only add collectives).
_NORM = re.compile(r"(^|_)norm$")

# Which mesh axes each logical axis of a parameter is split over.
_PARAM_AXES: dict[str, Any] = {"embed": "fsdp", "heads": "tensor", "kv_heads": "tensor", "mlp": "tensor",
                               "vocab": "tensor"}
# ... and of an activation: rows over data x fsdp, the model width whole (the weights are gathered
# instead), heads, MLP inner dimension and vocabulary over tensor, as their weights are.
_ACTIVATION_AXES: dict[str, Any] = {"batch": BATCH_AXES, "heads": "tensor", "kv_heads": "tensor", "mlp": "tensor",
                                    "vocab": "tensor"}


def _spec(logical: Sequence[str | None], shape: Sequence[int], table: Mapping[str, Any], sizes: Mapping[str, int],
          units: Mapping[str, int] | None) -> tuple[Any, ...]:
    """Map logical axes to mesh axes, keeping a dimension whole where the mesh axes do not divide it
    (or do not divide its count of ``units``: a head is never cut in two)."""
    spec: list[Any] = []
    for axis, dim in zip(logical, shape, strict=True):
        mesh_axes = table.get(axis) if axis else None
        names = () if mesh_axes is None else (mesh_axes if isinstance(mesh_axes, tuple) else (mesh_axes,))
        size = math.prod(sizes.get(n, 1) for n in names)
        count = (units or {}).get(axis, dim) if axis else dim
        spec.append(mesh_axes if size > 1 and dim % size == 0 and count % size == 0 else None)
    return tuple(spec)


def param_spec(module: str, name: str, shape: Sequence[int], sizes: Mapping[str, int],
               units: Mapping[str, int] | None = None) -> tuple[str | None, ...]:
    """The partition spec (one mesh axis or None per dimension) of parameter ``module/name``.

    A dimension is split over its mesh axis only when that axis divides it (and, for
    ``units`` such as ``{"heads": 8}``, divides the count of whole units in it, so a head is
    never cut in two); otherwise it stays whole on that axis.

    Stacked layer weights (``layers/...``, ``levanter.models.layout``) have the layers on a leading
    axis, never split: each layer's slice is split as that layer's weight would be.

    Raises:
        KeyError: no rule names the parameter (add one to ``_RULES``).
    """
    if module.startswith(_STACKED_PREFIX) and len(shape) >= 1:
        return (None, *param_spec(module[len(_STACKED_PREFIX):], name, shape[1:], sizes, units))
    leaf_module = module.rsplit("/", 1)[-1]
    if _NORM.search(leaf_module) and name == "scale":
        return (None,) * len(shape)
    logical = _RULES.get((leaf_module, name))
    if name in _LORA_FACTORS and (leaf_module, "w") in _RULES:
        # A LoRA factor keeps its weight's split on the side it shares with it (levanter.lora).
        w_in, w_out = _RULES[(leaf_module, "w")][-2:]  # a weight's own two axes, after any leading ones
        logical = (None,) * (len(shape) - 2) + ((w_in, None) if name == LORA_A else (None, w_out))
    if logical is None:
        raise KeyError(f"no sharding rule for parameter {module}/{name} of shape {tuple(shape)}; "
                       "add one to levanter.sharding._RULES")
    if len(logical) != len(shape):
        raise ValueError(f"sharding rule for {module}/{name} expects {len(logical)} dimensions, "
                         f"got shape {tuple(shape)}")
    return _spec(logical, shape, _PARAM_AXES, sizes, units)


def activation_sharder(mesh: Any, units: Mapping[str, int] | None = None) -> Callable[[Any, Sequence[str | None]], Any]:
    """``shard(x, logical_axes)``: constrain activation ``x`` (axes such as ``("batch", None, "mlp")``) on ``mesh``.

    Without these constraints XLA may keep weights split and gather the batch instead, which
    undoes FSDP (every device would hold every row's activations). The sharder also tells kernels
    that XLA cannot split (splash attention) its ``mesh``, ``batch_axes`` and ``head_axis``.
    """
    return _Sharder(mesh, dict(units or {}))


class _Sharder:
    """The callable :func:`activation_sharder` returns."""

    batch_axes = BATCH_AXES
    head_axis = _ACTIVATION_AXES["heads"]

    def __init__(self, mesh: Any, units: Mapping[str, int]):
        self.mesh = mesh
        self._units = units
        self._sizes = dict(mesh.shape)

    def __call__(self, x: Any, logical: Sequence[str | None]) -> Any:
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        spec = _spec(logical, x.shape, _ACTIVATION_AXES, self._sizes, self._units)
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, PartitionSpec(*spec)))


def batch_spec() -> tuple[Any, ...]:
    """Partition spec of a ``[batch, ...]`` array: rows split over data x fsdp."""
    return (BATCH_AXES,)


def _param_key(path: Sequence[Any]) -> tuple[str, str] | None:
    """(module, name) of a leaf whose path ends in two dict keys (params and Adam's mu/nu alike)."""
    keys = [getattr(k, "key", None) for k in path[-2:]]
    if len(keys) == 2 and all(isinstance(k, str) for k in keys):
        return keys[0], keys[1]
    return None


def tree_shardings(tree: Any, mesh: Any, units: Mapping[str, int] | None = None) -> Any:
    """``NamedSharding`` of every leaf of a training state (params, optimizer state, scalars).

    Leaves under a ``module/name`` path (parameters, and optimizer moments mirroring them) follow
    :func:`param_spec`; scalars and other non-parameter leaves are replicated.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sizes = dict(mesh.shape)

    def one(path: Any, leaf: Any) -> Any:
        shape = getattr(leaf, "shape", ())
        key = _param_key(path)
        if key is None or not shape:
            return NamedSharding(mesh, PartitionSpec())
        return NamedSharding(mesh, PartitionSpec(*param_spec(key[0], key[1], shape, sizes, units)))

    return jax.tree_util.tree_map_with_path(one, tree)


def shard_bytes(tree: Any) -> tuple[int, int]:
    """(largest bytes held by one device, total bytes) of the arrays in ``tree``, from their shards."""
    import jax

    per_device: dict[Any, int] = {}
    total = 0
    for leaf in jax.tree.leaves(tree):
        if not isinstance(leaf, jax.Array):
            continue
        total += leaf.nbytes
        for shard in leaf.addressable_shards:
            per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
    return max(per_device.values(), default=0), total


def process_rows(sharding: Any, global_rows: int, ndim: int = 2) -> slice:
    """The rows of a ``[global_rows, ...]`` batch that this process's devices hold under ``sharding``.

    Raises:
        ValueError: this process's rows are not one contiguous block (a mesh layout the input
            pipeline cannot feed).
    """
    shape = (global_rows,) + (1,) * (ndim - 1)
    held = sorted({(idx[0].start or 0, global_rows if idx[0].stop is None else idx[0].stop)
                   for idx in sharding.addressable_devices_indices_map(shape).values()})
    start, stop = held[0][0], held[0][1]
    for lo, hi in held[1:]:
        if lo > stop:
            raise ValueError(f"this process's batch rows are not contiguous under {sharding}: {held}")
        stop = max(stop, hi)
    return slice(start, stop)
