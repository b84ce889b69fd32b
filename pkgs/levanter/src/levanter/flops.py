"""FLOPs accounting of a training run: peak FLOP/s of a device, the compiled step's FLOPs, MFU and HFU.

Two counts of the work done, as usual:

* model FLOPs: what the model's arithmetic needs, from its config (``flops_per_token``; the
  convention is stated there), whatever the implementation does;
* hardware FLOPs: what the compiled train step executes, from XLA's cost analysis (it includes
  recomputation and the optimizer update, and whatever XLA counts that the model count does not).

Utilisation is either count over elapsed time, devices and the peak FLOP/s of one device.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

__all__ = [
    "FlopsSummary",
    "PeakFlops",
    "compiled_step_flops",
    "device_peak_flops",
    "peak_flops",
    "utilisation",
]

# Dense bfloat16 peak per device (vendor datasheets), keyed by the start of the ``device_kind`` JAX
# reports; the longest matching key wins ("TPU v5 lite" before "TPU v5"). float32 runs are measured
# against the same peak because that is the number an MFU is normally quoted against.
_DATASHEET_PEAKS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,  # v5e
    "TPU v5e": 197e12,
    "TPU v5": 459e12,  # v5p reports "TPU v5"
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,  # v6e (Trillium)
    "TPU v6e": 918e12,
    "NVIDIA A100": 312e12,
    "NVIDIA H100": 989e12,  # SXM ("NVIDIA H100 80GB HBM3")
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,
    "NVIDIA B200": 2250e12,
}

MEASURED_SOURCE = "measured:cpu-matmul"
"""Where a peak comes from when no datasheet names the device: the best rate of a square matmul."""

CONFIG_SOURCE = "config"
"""Where a peak comes from when the run's config gives it (``peak_flops_per_device``)."""


@dataclasses.dataclass(frozen=True)
class PeakFlops:
    """Peak FLOP/s of one device and where the number comes from."""

    flops_per_s: float
    """Peak FLOP/s of one device."""
    source: str
    """``datasheet:<device kind>``, ``measured:cpu-matmul`` or ``config``."""


def _datasheet_peak(kind: str) -> tuple[str, float] | None:
    matches = [name for name in _DATASHEET_PEAKS if kind.startswith(name)]
    if not matches:
        return None
    name = max(matches, key=len)
    return name, _DATASHEET_PEAKS[name]


def _measured_matmul_peak(device: Any, dtype: Any) -> float:
    """Best FLOP/s of a large square matmul on ``device``: the practical ceiling of a CPU."""
    import jax  # deferred: the datasheet lookup and the summary arithmetic need no JAX
    import jax.numpy as jnp

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


def peak_flops(dtype: Any = None, device: Any = None) -> PeakFlops:
    """Peak FLOP/s of one device: a datasheet value for known accelerators, else measured.

    On CPUs (and unknown accelerators) there is no meaningful datasheet number, so the peak is
    the best rate of a 1024x1024 matmul in ``dtype`` (default float32); MFU then says how close
    training gets to the fastest dense kernel this machine runs.
    """
    import jax  # deferred, as above
    import jax.numpy as jnp

    device = device or jax.devices()[0]
    kind = getattr(device, "device_kind", "")
    known = _datasheet_peak(kind)
    if known is not None:
        return PeakFlops(known[1], f"datasheet:{kind}")
    return PeakFlops(_measured_matmul_peak(device, jnp.float32 if dtype is None else dtype), MEASURED_SOURCE)


def device_peak_flops(dtype: Any = None, device: Any = None) -> float:
    """Peak FLOP/s of one device (:func:`peak_flops` without its source)."""
    return peak_flops(dtype, device).flops_per_s


def compiled_step_flops(compiled: Any, num_devices: int) -> float | None:
    """FLOPs one call of ``compiled`` (a compiled jitted function) executes over all ``num_devices``.

    XLA's cost analysis describes the program one device runs (the partitioned program when the
    step is split over a mesh), so it is scaled by the device count. Loops count one iteration
    whatever their trip count, so a step with gradient accumulation (a scan) is undercounted; the
    caller says so rather than guess. None when the backend gives no analysis or no ``flops``.
    """
    try:
        analysis = compiled.cost_analysis()
    except NotImplementedError:  # a backend without a cost model (some plugins)
        return None
    if isinstance(analysis, list | tuple):  # older JAX: one dict per computation
        analysis = analysis[0] if analysis else None
    flops = analysis.get("flops") if analysis else None
    if flops is None or not flops > 0:
        return None
    return float(flops) * num_devices


def utilisation(flops: float, seconds: float, num_devices: int, peak_per_device: float) -> float:
    """``flops`` done in ``seconds`` as a share of ``num_devices`` devices' peak (nan without time)."""
    if not seconds > 0:
        return math.nan
    return flops / seconds / (num_devices * peak_per_device)


@dataclasses.dataclass(frozen=True)
class FlopsSummary:
    """The FLOPs of a run and how well the devices were used, for its summary."""

    num_params: int
    """Parameters of the model."""
    flops_per_token: float
    """Model FLOPs per token trained (the model config's ``flops_per_token`` at the run's context)."""
    tokens_trained: int
    """Tokens trained on, over all steps (earlier attempts of a resumed run included)."""
    model_flops: float
    """``flops_per_token * tokens_trained``."""
    hardware_flops: float | None
    """XLA's FLOPs of one compiled step times the steps trained (None: no cost analysis, or it
    cannot count the step, see :func:`compiled_step_flops`)."""
    mfu: float | None
    """Model FLOPs of this attempt's steps / (its training time * devices * peak); None when it
    trained no step."""
    hfu: float | None
    """The same with hardware FLOPs."""
    peak_flops_per_device: float
    """The peak both utilisations are measured against."""
    peak_flops_source: str
    """Where the peak comes from (:class:`PeakFlops`)."""
    mfu_causal: float | None = None
    """:attr:`mfu` with the causal count of model FLOPs (attention halved for the causal mask,
    MaxText's convention; ``flops_per_token(seq_len, causal=True)``)."""

    @classmethod
    def of_run(cls, *, num_params: int, flops_per_token: float, tokens_per_step: int, steps: int, steps_run: int,
               train_seconds: float, num_devices: int, peak: PeakFlops,
               step_hardware_flops: float | None, causal_flops_per_token: float | None = None) -> FlopsSummary:
        """Account a run of ``steps`` steps, ``steps_run`` of them in ``train_seconds`` by this attempt."""
        model_step = flops_per_token * tokens_per_step

        def used(step_flops: float | None) -> float | None:
            if step_flops is None or steps_run == 0:
                return None
            share = utilisation(step_flops * steps_run, train_seconds, num_devices, peak.flops_per_s)
            return share if math.isfinite(share) else None

        return cls(num_params=num_params, flops_per_token=flops_per_token, tokens_trained=tokens_per_step * steps,
                   model_flops=model_step * steps,
                   hardware_flops=None if step_hardware_flops is None else step_hardware_flops * steps,
                   mfu=used(model_step), hfu=used(step_hardware_flops),
                   peak_flops_per_device=peak.flops_per_s, peak_flops_source=peak.source,
                   mfu_causal=None if causal_flops_per_token is None else used(causal_flops_per_token * tokens_per_step))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
