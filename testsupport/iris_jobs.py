"""An importable multi-host job for tests: data-parallel loss and gradient of a linear model.

Lives in an installed package (the workspace root's ``testsupport``), not a test module, so
spawned processes and Ray workers can import it by name.
"""

from __future__ import annotations

import numpy as np

from iris.multihost import initialize_jax

__all__ = ["all_gather_then_linger", "data_parallel_loss_and_grad", "linear_loss_and_grad", "linear_problem"]


def linear_problem(batch: int = 16, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fixed global batch ``(x, y)`` and weights ``w`` for a least-squares linear model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, features)).astype(np.float32)
    y = (x @ rng.normal(size=(features,)) + 0.1 * rng.normal(size=(batch,))).astype(np.float32)
    w = rng.normal(size=(features,)).astype(np.float32)
    return x, y, w


def linear_loss_and_grad(x, y, w):
    """Mean squared error of ``x @ w`` against ``y`` and its gradient in ``w`` (JAX arrays)."""
    import jax
    import jax.numpy as jnp

    def loss(w):
        return jnp.mean((x @ w - y) ** 2)

    return jax.value_and_grad(loss)(w)


def data_parallel_loss_and_grad(batch: int, features: int, seed: int) -> dict:
    """One process of a data-parallel step: join the JAX job, shard the global batch across
    processes (each holds its rows only), and compute the global loss and gradient with one
    jitted function over the global array; XLA's cross-process all-reduce does the rest.

    Returns the process's view: its id, the process and device counts, loss and gradient.
    """
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    spec = initialize_jax()
    if spec is None:
        raise RuntimeError("not launched as a multi-host job (IRIS_NUM_PROCESSES is unset)")
    x, y, w = linear_problem(batch, features, seed)
    rows = batch // spec.num_processes
    mine = slice(spec.process_id * rows, (spec.process_id + 1) * rows)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    by_row = NamedSharding(mesh, PartitionSpec("data"))
    global_x = jax.make_array_from_process_local_data(by_row, x[mine], (batch, features))
    global_y = jax.make_array_from_process_local_data(by_row, y[mine], (batch,))
    replicated_w = jax.device_put(w, NamedSharding(mesh, PartitionSpec()))
    loss, grad = jax.jit(linear_loss_and_grad, out_shardings=NamedSharding(mesh, PartitionSpec()))(
        global_x, global_y, replicated_w
    )
    result = {
        "process_id": spec.process_id,
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "loss": float(np.asarray(loss.addressable_data(0))),
        "grad": np.asarray(grad.addressable_data(0)).tolist(),
    }
    return result


def all_gather_then_linger(linger_s: float) -> list[int]:
    """Join the JAX job, gather every process's id, then (all but process 0) spend ``linger_s``
    more before returning: a process finishing its call after process 0 has finished its own, as
    one slowed by a busy CPU does."""
    import time

    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    spec = initialize_jax()
    if spec is None:
        raise RuntimeError("not launched as a multi-host job (IRIS_NUM_PROCESSES is unset)")
    ids = multihost_utils.process_allgather(jnp.asarray(spec.process_id))
    if spec.process_id != 0:
        time.sleep(linger_s)
    return np.asarray(ids).tolist()
