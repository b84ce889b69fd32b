"""A finished run's parameters: ``final/params.npz``, one array per ``module/name`` (read by ``levanter.generate``)."""

from __future__ import annotations

import io
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from rigging import filesystem as fs

__all__ = ["PARAMS_FILE", "save_final_params"]

PARAMS_FILE = "params.npz"
"""The final parameters' file name in a run's ``final/`` folder."""


def _flatten_params(params: Any) -> dict[str, np.ndarray]:
    return {f"{module}/{name}": np.asarray(value)
            for module, names in params.items() for name, value in names.items()}


def _copies(tree: Any) -> Any:
    return jax.tree.map(lambda x: x.copy(), tree)


def save_final_params(output_path: str, params: Any, name: str = PARAMS_FILE) -> str:
    """Write ``params`` (Haiku's ``{module: {name: array}}``, possibly split over processes) under
    ``output_path`` as ``final/<name>`` (``params.npz``; ``ema_params.npz`` for an average); every
    process must call it. Returns the file's path."""
    path = fs.join(output_path, "final", name)
    if jax.process_count() > 1:
        # One program gathers every array (a collective: every process calls it); JAX's
        # ``process_allgather`` compiles one per shape and placement, in every process.
        whole = jax.tree.map(lambda x: x.sharding.update(spec=PartitionSpec()), params)
        gathered = jax.jit(_copies, out_shardings=whole)(params)
        host = jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), gathered)
    else:
        host = jax.device_get(params)
    if jax.process_index() == 0:
        buffer = io.BytesIO()
        np.savez(buffer, **_flatten_params(host))
        fs.atomic_write(path, buffer.getvalue())
    return path
