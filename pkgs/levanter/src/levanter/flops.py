"""Peak FLOP/s of the local devices, for model FLOPs utilisation (MFU)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

__all__ = ["device_peak_flops"]

# Dense bfloat16 peak per device (vendor datasheets); float32 runs are measured against the same
# peak because that is the number an MFU is normally quoted against.
_KNOWN_PEAKS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100": 312e12,
}


def _measured_matmul_peak(device: jax.Device, dtype: jnp.dtype) -> float:
    """Best FLOP/s of a large square matmul on ``device``: the practical ceiling of a CPU."""
    n = 1024
    a = jax.device_put(jnp.ones((n, n), dtype), device)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best


def device_peak_flops(dtype: jnp.dtype = jnp.float32, device: jax.Device | None = None) -> float:
    """Peak FLOP/s of one device: a datasheet value for known accelerators, else measured.

    On CPUs (and unknown accelerators) there is no meaningful datasheet number, so the peak is
    the best rate of a 1024x1024 matmul in ``dtype``; MFU then says how close training gets to
    the fastest dense kernel this machine runs.
    """
    device = device or jax.devices()[0]
    kind = getattr(device, "device_kind", "")
    for name, peak in _KNOWN_PEAKS.items():
        if kind.startswith(name):
            return peak
    return _measured_matmul_peak(device, dtype)
