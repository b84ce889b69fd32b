"""What a job needs: CPUs, memory and an accelerator (a GPU type and count, or a TPU slice)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TPU_TYPES",
    "GpuConfig",
    "ResourceConfig",
    "TpuConfig",
    "TpuTopology",
    "parse_memory",
]


@dataclass(frozen=True)
class TpuTopology:
    """The shape of one TPU slice type.

    Attributes:
        hosts: how many VMs (hosts) the slice has; each runs one process of a job.
        chips_per_host: TPU chips attached to each host.
        gce_name: the accelerator type as GCE and Ray's TPU resources name it (``v5litepod-16``).
    """

    hosts: int
    chips_per_host: int
    gce_name: str

    @property
    def chips(self) -> int:
        return self.hosts * self.chips_per_host


def _table() -> dict[str, TpuTopology]:
    table: dict[str, TpuTopology] = {}
    # v4 and v5p count TensorCores (2 per chip) in their names; 4 chips per host.
    for gen in ("v4", "v5p"):
        for cores in (8, 16, 32, 64, 128, 256, 512):
            chips = cores // 2
            table[f"{gen}-{cores}"] = TpuTopology(hosts=max(1, chips // 4), chips_per_host=min(4, chips),
                                                  gce_name=f"{gen}-{cores}")
    # v5e and v6e count chips; up to 8 chips fit one host, larger slices use 4-chip hosts.
    for gen, gce in (("v5e", "v5litepod"), ("v6e", "v6e")):
        for chips in (1, 4, 8, 16, 32, 64, 128, 256):
            hosts, per_host = (1, chips) if chips <= 8 else (chips // 4, 4)
            table[f"{gen}-{chips}"] = TpuTopology(hosts=hosts, chips_per_host=per_host, gce_name=f"{gce}-{chips}")
    return table


TPU_TYPES: Mapping[str, TpuTopology] = _table()
"""Known TPU slice types, by the name used in :class:`TpuConfig` (``v4-8``, ``v5e-16``, ``v6e-8`` ...)."""


@dataclass(frozen=True)
class GpuConfig:
    """GPUs on each host.

    Attributes:
        type: the GPU model as Ray's ``accelerator_type`` names it (``A100``, ``H100``, ``L4`` ...).
        count: GPUs per host.
    """

    type: str
    count: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type.strip():
            raise ValueError(f"GPU type must be a non-empty string, got {self.type!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"GPU count must be an integer >= 1, got {self.count!r}")


@dataclass(frozen=True)
class TpuConfig:
    """A TPU slice.

    Attributes:
        type: a slice type from :data:`TPU_TYPES` (``v5e-8``, ``v4-32`` ...).
    """

    type: str

    def __post_init__(self) -> None:
        if self.type not in TPU_TYPES:
            raise ValueError(f"unknown TPU type {self.type!r}; known types: {', '.join(TPU_TYPES)}")

    @property
    def topology(self) -> TpuTopology:
        return TPU_TYPES[self.type]

    @property
    def hosts(self) -> int:
        return self.topology.hosts

    @property
    def chips_per_host(self) -> int:
        return self.topology.chips_per_host


Accelerator = GpuConfig | TpuConfig | None

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_memory(value: int | str) -> int:
    """Bytes from an integer or a size such as ``"512MiB"``, ``"16GB"``, ``"1.5GiB"``.

    Raises:
        ValueError: the value is negative or not a size; the message names it.
    """
    if isinstance(value, bool):
        raise ValueError(f"memory must be bytes or a size like '8GiB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"memory must be >= 0 bytes, got {value!r}")
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if match and match.group(2).lower() in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise ValueError(f"memory must be bytes or a size like '8GiB', got {value!r}")


@dataclass(frozen=True)
class ResourceConfig:
    """What one job needs, per host. A job spans :attr:`num_hosts` hosts (one process each).

    Attributes:
        cpus: CPU cores per host (fractions allowed, as in Ray).
        memory: bytes of memory per host; None leaves it unreserved.
        accelerator: None, a :class:`GpuConfig` or a :class:`TpuConfig`.
        preemptible: the job may run on preemptible (spot) hosts.
        max_retries: how many times the job is rerun after its host is lost or preempted.
        hosts: hosts the job spans, one process on each; a TPU slice brings its own count, so
            leave it at 1 (or give the slice's count) for TPU jobs.
    """

    cpus: float = 1.0
    memory: int | None = None
    accelerator: Accelerator = None
    preemptible: bool = False
    max_retries: int = 0
    hosts: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int | float) or not self.cpus > 0:
            raise ValueError(f"cpus must be a number > 0, got {self.cpus!r}")
        if self.memory is not None and (
            isinstance(self.memory, bool) or not isinstance(self.memory, int) or self.memory < 0
        ):
            raise ValueError(f"memory must be None or an integer number of bytes >= 0, got {self.memory!r}")
        if self.accelerator is not None and not isinstance(self.accelerator, GpuConfig | TpuConfig):
            raise ValueError(f"accelerator must be None, GpuConfig or TpuConfig, got {self.accelerator!r}")
        if not isinstance(self.preemptible, bool):
            raise ValueError(f"preemptible must be True or False, got {self.preemptible!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise ValueError(f"hosts must be an integer >= 1, got {self.hosts!r}")
        if isinstance(self.accelerator, TpuConfig) and self.hosts not in (1, self.accelerator.hosts):
            raise ValueError(
                f"hosts must be 1 or {self.accelerator.hosts} for TPU {self.accelerator.type}, got {self.hosts!r}"
            )

    @classmethod
    def with_cpu(cls, cpus: float = 1, memory: int | str | None = None, **kw: Any) -> ResourceConfig:
        """CPUs and memory only (``memory`` may be a size such as ``"8GiB"``); ``hosts=`` spans several."""
        return cls(cpus=cpus, memory=None if memory is None else parse_memory(memory), **kw)

    @classmethod
    def with_gpu(cls, type: str, count: int = 1, *, hosts: int = 1, cpus: float = 1,
                 memory: int | str | None = None, **kw: Any) -> ResourceConfig:
        """``count`` GPUs of ``type`` on each of ``hosts`` hosts."""
        return cls(cpus=cpus, memory=None if memory is None else parse_memory(memory),
                   accelerator=GpuConfig(type=type, count=count), hosts=hosts, **kw)

    @classmethod
    def with_tpu(cls, type: str, *, cpus: float = 1, memory: int | str | None = None,
                 preemptible: bool = True, max_retries: int = 3, **kw: Any) -> ResourceConfig:
        """A whole TPU slice of ``type`` (such as ``"v5e-8"``); preemptible with 3 retries by default."""
        return cls(cpus=cpus, memory=None if memory is None else parse_memory(memory),
                   accelerator=TpuConfig(type=type), preemptible=preemptible, max_retries=max_retries, **kw)

    @property
    def num_hosts(self) -> int:
        """How many hosts (and processes) the job spans."""
        if isinstance(self.accelerator, TpuConfig):
            return self.accelerator.hosts
        return self.hosts

    @property
    def gpus_per_host(self) -> int:
        return self.accelerator.count if isinstance(self.accelerator, GpuConfig) else 0

    @property
    def tpu_chips_per_host(self) -> int:
        return self.accelerator.chips_per_host if isinstance(self.accelerator, TpuConfig) else 0

    def replace(self, **changes: Any) -> ResourceConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def ray_bundle(self) -> dict[str, float]:
        """The resources of one host's share, as a Ray placement-group bundle."""
        bundle: dict[str, float] = {"CPU": float(self.cpus)}
        if self.memory:
            bundle["memory"] = float(self.memory)
        match self.accelerator:
            case GpuConfig(type=gpu_type, count=count):
                bundle["GPU"] = float(count)
                # What Ray's accelerator_type option asks for, inside a bundle.
                bundle[f"accelerator_type:{gpu_type}"] = 0.001
            case TpuConfig() as tpu:
                bundle["TPU"] = float(tpu.chips_per_host)
        return bundle

    def ray_bundles(self) -> list[dict[str, float]]:
        """One bundle per host; the first also asks for the slice's ``TPU-<type>-head`` resource.

        Ray's TPU nodes advertise ``TPU-<gce type>-head`` on worker 0 of each slice, so asking for
        it places process 0 on a slice's first host and the rest (with a STRICT_SPREAD placement
        group) on other hosts.
        """
        bundles = [self.ray_bundle() for _ in range(self.num_hosts)]
        if isinstance(self.accelerator, TpuConfig) and self.num_hosts > 1:
            bundles[0][f"TPU-{self.accelerator.topology.gce_name}-head"] = 1.0
        return bundles

    def to_ray_options(self) -> dict[str, Any]:
        """Ray ``.options(...)`` for one process of the job (``num_cpus``, ``num_gpus``, ``memory``,
        ``resources`` for TPU chips, ``accelerator_type`` for a GPU model, ``max_retries``)."""
        options: dict[str, Any] = {"num_cpus": self.cpus, "max_retries": self.max_retries}
        if self.memory:
            options["memory"] = self.memory
        match self.accelerator:
            case GpuConfig(type=gpu_type, count=count):
                options["num_gpus"] = count
                options["accelerator_type"] = gpu_type
            case TpuConfig() as tpu:
                resources = {"TPU": tpu.chips_per_host}
                if tpu.hosts == 1:
                    # A single-host slice: ask for its head resource so the job gets a whole slice.
                    resources[f"TPU-{tpu.topology.gce_name}-head"] = 1
                options["resources"] = resources
        return options
