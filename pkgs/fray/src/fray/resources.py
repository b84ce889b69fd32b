"""What a job needs: CPUs, memory, disk and an accelerator (a GPU type and count, or a TPU slice).

``ResourceConfig`` accepts this project's keywords (``cpus``, ``memory``, ``hosts``) and Marin's
(``cpu``, ``ram``, ``disk``, ``regions``, ``zone``, ``replicas``; ``with_gpu(..., count=)``,
``with_tpu(..., slice_count=)``); both spell the same fields.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANY_REGION",
    "TPU_TYPES",
    "GpuConfig",
    "ResourceConfig",
    "TpuConfig",
    "TpuTopology",
    "parse_memory",
]

ANY_REGION = "*"
"""As the only entry of ``regions``: run in any region (Marin's spelling)."""


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
        for cores in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
            chips = cores // 2
            table[f"{gen}-{cores}"] = TpuTopology(hosts=max(1, chips // 4), chips_per_host=min(4, chips),
                                                  gce_name=f"{gen}-{cores}")
    # v5e and v6e count chips; up to 8 chips fit one host, larger slices use 4-chip hosts.
    for gen, gce in (("v5e", "v5litepod"), ("v6e", "v6e")):
        for chips in (1, 4, 8, 16, 32, 64, 128, 256):
            hosts, per_host = (1, chips) if chips <= 8 else (chips // 4, 4)
            table[f"{gen}-{chips}"] = TpuTopology(hosts=hosts, chips_per_host=per_host, gce_name=f"{gce}-{chips}")
    # The GCE names Marin's files use (v5litepod-16) name the same slices as v5e-16.
    for name, topology in list(table.items()):
        if topology.gce_name != name:
            table[topology.gce_name] = topology
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


def parse_memory(value: int | str, *, binary: bool = False) -> int:
    """Bytes from an integer or a size such as ``"512MiB"``, ``"16GB"``, ``"1.5GiB"``.

    Args:
        binary: read ``k``, ``m``, ``g``, ``t`` (and ``kb`` ...) as powers of 1024, as Marin's
            ``ram="16g"`` and ``disk="50g"`` mean them.

    Raises:
        ValueError: the value is negative or not a size; the message names it.
    """
    if binary and isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT])[bB]?\s*", value)
        if match:
            return int(float(match.group(1)) * 2 ** (10 * (" kmgt".index(match.group(2).lower()))))
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


_UNSET: Any = object()


def _memory(value: int | str | None, *, binary: bool) -> int | None:
    return None if value is None else parse_memory(value, binary=binary)


@dataclass(frozen=True, init=False)
class ResourceConfig:
    """What one job needs, per host. A job spans :attr:`num_hosts` hosts (one process each).

    Marin's keywords are accepted as other spellings of the same fields: ``cpu=`` for ``cpus``,
    ``ram=`` for ``memory`` (sizes such as ``"16g"`` are binary, as in Marin), ``replicas=`` for
    ``hosts``; ``disk``, ``regions`` and ``zone`` are fields of their own.

    Attributes:
        cpus: CPU cores per host (fractions allowed, as in Ray).
        memory: bytes of memory per host; None leaves it unreserved.
        accelerator: None, a :class:`GpuConfig` or a :class:`TpuConfig`.
        preemptible: the job may run on preemptible (spot) hosts.
        max_retries: how many times the job is rerun after its host is lost or preempted.
        hosts: hosts the job spans, one process on each; a TPU slice brings its own count, so
            leave it at 1 (or give the slice's count) for TPU jobs.
        disk: bytes of local disk per host; None leaves it unchecked.
        regions: cloud regions the job may run in (None: anywhere; ``[ANY_REGION]`` likewise);
            recorded for cluster schedulers, not used on a single machine.
        zone: the cloud zone, likewise recorded only.
    """

    cpus: float = 1.0
    memory: int | None = None
    accelerator: Accelerator = None
    preemptible: bool = False
    max_retries: int = 0
    hosts: int = 1
    disk: int | None = None
    regions: tuple[str, ...] | None = None
    zone: str | None = None

    def __init__(self, cpus: float = _UNSET, memory: int | str | None = _UNSET, accelerator: Accelerator = None,
                 preemptible: bool = False, max_retries: int = 0, hosts: int = _UNSET, disk: int | str | None = None,
                 regions: Any = None, zone: str | None = None, *, cpu: float = _UNSET, ram: int | str | None = _UNSET,
                 replicas: int = _UNSET) -> None:
        for ours, marins, a, b in (("cpus", "cpu", cpus, cpu), ("memory", "ram", memory, ram),
                                   ("hosts", "replicas", hosts, replicas)):
            if a is not _UNSET and b is not _UNSET:
                raise ValueError(f"give {ours}= or {marins}=, not both (got {a!r} and {b!r})")
        set_ = object.__setattr__
        set_(self, "cpus", 1.0 if cpus is _UNSET and cpu is _UNSET else (cpu if cpus is _UNSET else cpus))
        if memory is not _UNSET:
            set_(self, "memory", memory)
        else:
            set_(self, "memory", None if ram is _UNSET else _memory(ram, binary=True))
        set_(self, "accelerator", accelerator)
        set_(self, "preemptible", preemptible)
        set_(self, "max_retries", max_retries)
        set_(self, "hosts", 1 if hosts is _UNSET and replicas is _UNSET else (replicas if hosts is _UNSET else hosts))
        set_(self, "disk", disk if isinstance(disk, int | None) and not isinstance(disk, bool)
             else _memory(disk, binary=True) if isinstance(disk, str) else disk)
        if isinstance(regions, str):
            regions = (regions,)
        set_(self, "regions", None if regions is None else tuple(regions))
        set_(self, "zone", zone)
        self.__post_init__()

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int | float) or not self.cpus > 0:
            raise ValueError(f"cpus must be a number > 0, got {self.cpus!r}")
        if self.memory is not None and (
            isinstance(self.memory, bool) or not isinstance(self.memory, int) or self.memory < 0
        ):
            raise ValueError(f"memory must be None or an integer number of bytes >= 0, got {self.memory!r}")
        if self.disk is not None and (isinstance(self.disk, bool) or not isinstance(self.disk, int) or self.disk < 0):
            raise ValueError(f"disk must be None, a size like '50g' or bytes >= 0, got {self.disk!r}")
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
        if self.regions is not None and (not self.regions or not all(isinstance(r, str) and r for r in self.regions)):
            raise ValueError(f"regions must be None or a non-empty list of region names, got {self.regions!r}")
        if self.zone is not None and (not isinstance(self.zone, str) or not self.zone):
            raise ValueError(f"zone must be None or a zone name, got {self.zone!r}")

    @classmethod
    def with_cpu(cls, cpus: float = _UNSET, memory: int | str | None = None, **kw: Any) -> ResourceConfig:
        """CPUs and memory only (``memory`` may be a size such as ``"8GiB"``); ``hosts=`` spans several.

        Marin's ``with_cpu(cpu=4, ram="16g", disk="10g")`` is accepted as well.
        """
        if cpus is not _UNSET:
            kw["cpus"] = cpus
        if memory is not None:
            kw["memory"] = parse_memory(memory)
        return cls(**kw)

    @classmethod
    def with_gpu(cls, type: str = "auto", count: int = 1, *, hosts: int = _UNSET, cpus: float = _UNSET,
                 memory: int | str | None = None, **kw: Any) -> ResourceConfig:
        """``count`` GPUs of ``type`` (``"auto"``: any model) on each of ``hosts`` (or Marin's ``replicas``) hosts."""
        for name, value in (("hosts", hosts), ("cpus", cpus)):
            if value is not _UNSET:
                kw[name] = value
        if memory is not None:
            kw["memory"] = parse_memory(memory)
        return cls(accelerator=GpuConfig(type=type, count=count), **kw)

    @classmethod
    def with_tpu(cls, type: str | list[str] | tuple[str, ...], *, slice_count: int = 1, cpus: float = _UNSET,
                 memory: int | str | None = None, preemptible: bool = True, max_retries: int = 3,
                 **kw: Any) -> ResourceConfig:
        """A whole TPU slice of ``type`` (``"v5e-8"``, or GCE's ``"v5litepod-16"``); preemptible with
        3 retries by default. ``slice_count`` must be 1: multislice jobs are not supported."""
        if isinstance(type, list | tuple):
            if len(type) != 1:
                raise ValueError(f"with_tpu: alternative TPU types are not supported, got {list(type)!r}; give one type")
            type = type[0]
        if isinstance(slice_count, bool) or not isinstance(slice_count, int) or slice_count != 1:
            raise ValueError(f"with_tpu: slice_count must be 1 (multislice jobs are not supported), got {slice_count!r}")
        if cpus is not _UNSET:
            kw["cpus"] = cpus
        if memory is not None:
            kw["memory"] = parse_memory(memory)
        return cls(accelerator=TpuConfig(type=type), preemptible=preemptible, max_retries=max_retries, **kw)

    @property
    def cpu(self) -> float:
        """Marin's name for :attr:`cpus`."""
        return self.cpus

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
                if gpu_type != "auto":
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
                if gpu_type != "auto":
                    options["accelerator_type"] = gpu_type
            case TpuConfig() as tpu:
                resources = {"TPU": tpu.chips_per_host}
                if tpu.hosts == 1:
                    # A single-host slice: ask for its head resource so the job gets a whole slice.
                    resources[f"TPU-{tpu.topology.gce_name}-head"] = 1
                options["resources"] = resources
        return options
