"""A finished run's parameters: ``final/params.npz``, one array per ``module/name`` (read by ``levanter.generate``)."""

from __future__ import annotations

import io
from typing import Any

import jax
import numpy as np

from rigging import filesystem as fs

__all__ = ["PARAMS_FILE", "save_final_params"]

PARAMS_FILE = "params.npz"
"""The final parameters' file name in a run's ``final/`` folder."""


def _flatten_params(params: Any) -> dict[str, np.ndarray]:
    return {f"{module}/{name}": np.asarray(value)
            for module, names in params.items() for name, value in names.items()}


def save_final_params(output_path: str, params: Any, name: str = PARAMS_FILE) -> str:
    """Write ``params`` (Haiku's ``{module: {name: array}}``, possibly split over processes) under
    ``output_path`` as ``final/<name>`` (``params.npz``; ``ema_params.npz`` for an average); every
    process must call it. Returns the file's path."""
    path = fs.join(output_path, "final", name)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils  # only multi-process runs need it

        host = multihost_utils.process_allgather(params, tiled=True)  # a collective: every process calls it
    else:
        host = jax.device_get(params)
    if jax.process_index() == 0:
        buffer = io.BytesIO()
        np.savez(buffer, **_flatten_params(host))
        fs.atomic_write(path, buffer.getvalue())
    return path
