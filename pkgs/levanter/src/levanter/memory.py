"""Per-device memory of a training run: parameters, optimizer state (from the arrays' shards) and the
compiled step's temporaries (from XLA's memory analysis), written once at start to ``memory.json``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

__all__ = ["MEMORY_FILE", "MemoryReport", "measure_memory", "peak_bytes"]

MEMORY_FILE = "memory.json"
"""File name of the report in a training run's output folder."""

_FORMAT = "levanter.memory/v1"


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    """Bytes on the fullest device, and in total over all devices' unique data."""

    mesh: dict[str, int]
    """Axis sizes of the device mesh."""
    params_bytes_per_device: int
    """Parameter bytes on the device holding the most."""
    params_bytes_total: int
    """Parameter bytes of the whole (unsharded) model."""
    opt_state_bytes_per_device: int
    """Optimizer-state bytes on the device holding the most."""
    opt_state_bytes_total: int
    """Optimizer-state bytes, unsharded."""
    temp_bytes_per_device: int | None
    """Peak temporaries of the compiled training step on one device (None: backend does not say)."""
    step_argument_bytes_per_device: int | None
    """The compiled step's arguments on one device (state and batch), as XLA counts them."""
    step_output_bytes_per_device: int | None
    """The compiled step's outputs on one device (before donated inputs are reused)."""
    remat: str | None = None
    """The remat policy the step runs with (``levanter.models.impl.Remat``; None: not recorded)."""
    attention: str | None = None
    """The attention kernel the step runs with."""
    estimate: dict[str, Any] | None = None
    """``levanter.memory_estimate``'s bytes of the step by kind (what ``remat="auto"`` decided by)."""
    device_bytes_available: int | None = None
    """The device's memory for a program (None: the backend does not say)."""
    step_alias_bytes_per_device: int | None = None
    """The compiled step's outputs written over its donated arguments (the new state over the old)."""
    step_peak_bytes_per_device: int | None = None
    """The most the compiled step holds on one device at once by XLA's count (:func:`peak_bytes`)."""

    def to_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, **dataclasses.asdict(self)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemoryReport:
        if data.get("format") != _FORMAT:
            raise ValueError(f"not a {_FORMAT} memory report: format {data.get('format')!r}")
        # Reports written before the estimate was recorded lack its fields (they have defaults).
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def summary(self) -> str:
        """One log line: ``params 1.2 MiB/device of 9.6 MiB, ...``."""
        def mib(n: int | None) -> str:
            return "n/a" if n is None else f"{n / 2**20:.2f} MiB"
        return (f"per-device memory on mesh {self.mesh}: params {mib(self.params_bytes_per_device)} "
                f"(of {mib(self.params_bytes_total)}), optimizer state {mib(self.opt_state_bytes_per_device)} "
                f"(of {mib(self.opt_state_bytes_total)}), step temporaries {mib(self.temp_bytes_per_device)}")


def peak_bytes(analysis: Any) -> int | None:
    """The most device memory a compiled program holds at once by XLA's count (its
    ``memory_analysis()``): arguments, temporaries, and outputs but those written over a donated
    argument (``alias_size_in_bytes``: that buffer is counted once, as an argument). None where the
    backend does not say."""
    if analysis is None or getattr(analysis, "temp_size_in_bytes", None) is None:
        return None
    return int(analysis.argument_size_in_bytes + analysis.temp_size_in_bytes
               + analysis.output_size_in_bytes - analysis.alias_size_in_bytes)


def measure_memory(mesh: Any, params: Any, opt_state: Any, compiled: Any, execution: Any = None) -> MemoryReport:
    """Measure ``params`` and ``opt_state`` (placed arrays) and ``compiled`` (a compiled jitted step);
    record ``execution``'s choices and estimate (``levanter.training.execution.Execution``) with them."""
    from levanter.sharding import shard_bytes

    p_dev, p_total = shard_bytes(params)
    o_dev, o_total = shard_bytes(opt_state)
    analysis = compiled.memory_analysis()

    def field(name: str) -> int | None:
        value = getattr(analysis, name, None) if analysis is not None else None
        return int(value) if value is not None else None

    return MemoryReport(mesh=dict(mesh.shape), params_bytes_per_device=p_dev, params_bytes_total=p_total,
                        opt_state_bytes_per_device=o_dev, opt_state_bytes_total=o_total,
                        temp_bytes_per_device=field("temp_size_in_bytes"),
                        step_argument_bytes_per_device=field("argument_size_in_bytes"),
                        step_output_bytes_per_device=field("output_size_in_bytes"),
                        step_alias_bytes_per_device=field("alias_size_in_bytes"),
                        step_peak_bytes_per_device=peak_bytes(analysis),
                        remat=None if execution is None else execution.impl.remat.value,
                        attention=None if execution is None else execution.impl.attention.value,
                        estimate=None if execution is None else execution.estimate.to_json(),
                        device_bytes_available=None if execution is None else execution.available)
