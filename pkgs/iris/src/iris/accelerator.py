"""The host's accelerator: TPU chips or GPUs, found without opening them, or stated in the configuration.

Finding it must never initialise a device runtime: opening a TPU takes libtpu's lock, so a probe
through JAX would itself hold the chip. What the host shows is read instead (:func:`detect_accelerator`):

* TPU chips: the device files ``/dev/accel<N>``, else the numbered groups in ``/dev/vfio`` (a chip
  passed through to a VM or container) on a TPU host (``TPU_ACCELERATOR_TYPE`` is set, or a Google
  device, PCI vendor 0x1ae0, is in ``/sys/bus/pci/devices``). The generation comes from
  ``TPU_ACCELERATOR_TYPE`` (``v5litepod-4`` is a v5e); the chip count from the device files, never
  from that type: a host may be handed one chip of a larger board whose environment still names
  the whole board. ``TPU_VISIBLE_CHIPS``, where set, narrows the chips to those it lists.
* GPUs: ``CUDA_VISIBLE_DEVICES`` where set (empty: none), else the driver's ``/dev/nvidia<N>``
  files; the model from ``/proc/driver/nvidia/gpus/*/information``.

The configuration states it where detection is wrong (:func:`parse_accelerator`): ``v5e-1`` (a TPU
type as ``ResourceConfig.with_tpu`` names it), ``gpu:H100:8``, ``none``. Its *slots* are how many
processes may use it at once: one for all chips of a TPU host (libtpu lets one process hold them),
or one per chip (or per group of chips, or of GPUs) where the configuration splits it
(:meth:`HostAccelerator.with_slots`); each slot's process is then given only its chips
(``TPU_VISIBLE_CHIPS`` and ``TPU_PROCESS_BOUNDS``) or GPUs (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from iris.accelerator_env import users_environ

if TYPE_CHECKING:
    from fray.resources import GpuConfig, ResourceConfig, TpuConfig

__all__ = ["DEFAULT_TPU_LOCK", "AcceleratorKind", "HostAccelerator", "detect_accelerator", "parse_accelerator"]

DEFAULT_TPU_LOCK = "/tmp/libtpu_lockfile"
"""Where libtpu keeps its lock: the process that opened the TPU holds a POSIX write lock on it."""

_GOOGLE_PCI_VENDOR = "0x1ae0"
_GENERATIONS = {"v5litepod": "v5e", "v5lite": "v5e"}  # GCE's names of a generation -> with_tpu's
_MESH_CONTROLLER_PORT = 8476  # libtpu's default; each process of a split host needs one of its own


class AcceleratorKind(enum.Enum):
    """What the host's accelerator is."""

    TPU = "tpu"
    GPU = "gpu"


def _tpu_name(generation: str | None, chips: int) -> str | None:
    """The single-host TPU type of ``generation`` with ``chips`` chips (``v5e-1``, ``v4-8``), or None."""
    if generation is None:
        return None
    # fray's request types: not on the path that only finds the accelerator (every run takes it).
    from fray.resources import TPU_TYPES

    for name, topology in TPU_TYPES.items():
        if name.startswith(f"{generation}-") and topology.hosts == 1 and topology.chips_per_host == chips:
            return name
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class HostAccelerator:
    """This host's accelerator and how many processes may use it at once.

    Attributes:
        kind: TPU or GPU.
        count: TPU chips or GPUs this host has (that this process may see).
        model: the TPU generation (``v5e``, ``v4``) or the GPU model (``H100``); None: unknown.
        slots: how many processes may use it at once (each a share of ``count``).
        source: where it was found or stated, in words (``marin config`` shows it).
        devices: the device ids (GPUs, as ``CUDA_VISIBLE_DEVICES`` numbers them); TPU chips are
            numbered 0 to ``count - 1``.
    """

    kind: AcceleratorKind
    count: int
    model: str | None = None
    slots: int = 1
    source: str = ""
    devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"an accelerator has at least one device, got count={self.count!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1 or self.count % self.slots:
            raise ValueError(f"accelerator slots must divide its {self.count} devices, got {self.slots!r}")
        if not self.devices:
            object.__setattr__(self, "devices", tuple(str(i) for i in range(self.count)))
        if len(self.devices) != self.count:
            raise ValueError(f"{self.count} devices need {self.count} ids, got {list(self.devices)}")

    @property
    def slot_size(self) -> int:
        """Chips or GPUs in one slot."""
        return self.count // self.slots

    @property
    def spec(self) -> str:
        """How the configuration states it: ``v5e-1``, ``gpu:H100:8`` (``tpu:<n>`` for a TPU
        whose generation or chip count names no type)."""
        if self.kind is AcceleratorKind.GPU:
            return f"gpu:{self.model or 'auto'}:{self.count}"
        return _tpu_name(self.model, self.count) or f"{self.model or 'tpu'}:{self.count}"

    def describe(self) -> str:
        """``TPU v5e-1 (1 chip)``, ``GPU H100 x8 (2 slots of 4)``."""
        if self.kind is AcceleratorKind.GPU:
            text = f"GPU {self.model or '(model unknown)'} x{self.count}"
        else:
            text = f"TPU {self.spec} ({_plural(self.count, 'chip')})"
        if self.slots > 1:
            text += f", {self.slots} slots of {self.slot_size}"
        return text

    @property
    def default_lock(self) -> str | None:
        """The lock file its runtime holds while a process uses it (libtpu's), None for GPUs."""
        return DEFAULT_TPU_LOCK if self.kind is AcceleratorKind.TPU else None

    def with_slots(self, slots: int) -> HostAccelerator:
        """The same accelerator split into ``slots`` (each a process's share).

        Raises:
            ValueError: ``slots`` does not divide the devices, or a TPU share names no TPU type.
        """
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1 or self.count % slots:
            raise ValueError(f"{self.describe()} cannot be split into {slots!r} slots: give a number that divides "
                             f"{self.count}")
        if self.kind is AcceleratorKind.TPU and slots > 1 and _tpu_name(self.model, self.count // slots) is None:
            raise ValueError(f"{self.describe()} cannot be split into {slots} slots: no TPU type of "
                             f"{_plural(self.count // slots, 'chip')} for {self.model or 'an unknown generation'}")
        return dataclasses.replace(self, slots=slots)

    def slot_request(self) -> TpuConfig | GpuConfig:
        """What a step that uses this host's accelerator asks for by default: one slot.

        Raises:
            ValueError: a TPU whose generation or chip count names no type (state it in the configuration).
        """
    # fray's request types: not on the path that only finds the accelerator (every run takes it).
        from fray.resources import GpuConfig, TpuConfig

        if self.kind is AcceleratorKind.GPU:
            return GpuConfig(type=self.model or "auto", count=self.slot_size)
        name = _tpu_name(self.model, self.slot_size)
        if name is None:
            raise ValueError(f"this host's TPU ({self.model or 'generation unknown'}, "
                             f"{_plural(self.slot_size, 'chip')} a slot; {self.source}) names no TPU type: state it "
                             "with `accelerator: <type>` (v5e-1, v4-8 ...) in config/marin.yaml or MARIN_ACCELERATOR")
        return TpuConfig(name)

    def slots_needed(self, resources: ResourceConfig) -> int:
        """How many slots a job asking ``resources`` (all its hosts on this one) takes: none without
        an accelerator; a TPU job one slot when its chips fit one, else the whole host (libtpu's
        processes cannot share a chip); a GPU job as many slots as its GPUs fill.

        Raises:
            ValueError: it can never run here; the message names what it asks and what this host has.
        """
        asked = resources.accelerator
        if asked is None:
            return 0
    # fray's request types: not on the path that only finds the accelerator (every run takes it).
        from fray.resources import TpuConfig

        if isinstance(asked, TpuConfig):
            wanted, what = resources.tpu_chips_per_host * resources.num_hosts, f"TPU {asked.type}"
            unit = "chip"
        else:
            wanted, what = resources.gpus_per_host * resources.num_hosts, f"GPU {asked.type} x{asked.count}"
            unit = "GPU"
        same_kind = (self.kind is AcceleratorKind.TPU) == isinstance(asked, TpuConfig)
        if not same_kind or wanted > self.count:
            raise ValueError(f"asks for {what} ({_plural(wanted, unit)}) but this host has {self.describe()} "
                             f"({self.source})")
        if self.kind is AcceleratorKind.TPU:
            return 1 if wanted <= self.slot_size else self.slots
        return math.ceil(wanted / self.slot_size)

    def slot_env(self, slots: Sequence[int]) -> dict[str, str]:
        """The environment that gives a process the devices of ``slots`` (and only those)."""
        if self.kind is AcceleratorKind.GPU:
            ids = [d for s in sorted(slots) for d in self.devices[s * self.slot_size:(s + 1) * self.slot_size]]
            return {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
        if len(slots) == self.slots:
            return {}  # the whole host, as its own environment describes it
        first = min(slots)
        chips = ",".join(str(c) for c in range(first * self.slot_size, (first + 1) * self.slot_size))
        bounds = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}[self.slot_size]
        port = str(_MESH_CONTROLLER_PORT + first)
        return {"TPU_VISIBLE_CHIPS": chips, "TPU_VISIBLE_DEVICES": chips, "TPU_CHIPS_PER_PROCESS_BOUNDS": bounds,
                "TPU_PROCESS_BOUNDS": "1,1,1", "TPU_MESH_CONTROLLER_PORT": port,
                "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{port}"}

    def hidden_env(self) -> dict[str, str]:
        """The environment that hides it from JAX (and, for GPUs, from CUDA)."""
        env = {"JAX_PLATFORMS": "cpu"}
        if self.kind is AcceleratorKind.GPU:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env


def _generation(accelerator_type: str) -> str | None:
    """``v5e`` from ``v5litepod-4``, ``v4`` from ``v4-8``; None for text that names no generation."""
    match = re.fullmatch(r"\s*(v\d+[a-z]*)-\d+\s*", accelerator_type.lower())
    if match is None:
        return None
    return _GENERATIONS.get(match.group(1), match.group(1))


def parse_accelerator(text: str, *, source: str = "", environ: Mapping[str, str] | None = None
                      ) -> HostAccelerator | None:
    """The accelerator a configuration states: ``none`` (None), a single-host TPU type
    (``v5e-1``, ``v5litepod-4``, ``v4-8``) or ``gpu:<model>:<count>`` (``gpu:H100:8``; ``gpu:H100`` is one).

    Args:
        source: where the text came from (kept as the accelerator's :attr:`~HostAccelerator.source`).
        environ: the user's environment, whose ``CUDA_VISIBLE_DEVICES`` numbers stated GPUs.

    Raises:
        ValueError: the text is none of those; the message says what is accepted.
    """
    spec = text.strip()
    if spec.lower() == "none":
        return None
    # fray's request types: not on the path that only finds the accelerator (every run takes it).
    from fray.resources import TPU_TYPES

    gpu = re.fullmatch(r"gpu:([A-Za-z0-9_.-]+)(?::(\d+))?", spec, flags=re.IGNORECASE)
    if gpu is not None:
        count = int(gpu.group(2) or 1)
        if count < 1:
            raise ValueError(f"{spec!r}: a GPU count must be >= 1")
        listed = _listed((environ or {}).get("CUDA_VISIBLE_DEVICES"))
        devices = tuple(listed) if listed is not None and len(listed) == count else ()
        return HostAccelerator(AcceleratorKind.GPU, count, gpu.group(1), source=source, devices=devices)
    topology = TPU_TYPES.get(spec)
    if topology is not None:
        if topology.hosts != 1:
            raise ValueError(f"{spec!r} spans {topology.hosts} hosts: state this host's share, a single-host type "
                             f"of {topology.chips_per_host} chips")
        return HostAccelerator(AcceleratorKind.TPU, topology.chips_per_host, _generation(spec), source=source)
    raise ValueError(f"unknown accelerator {spec!r}: expected none, a single-host TPU type "
                     "(v5e-1, v5e-4, v5e-8, v6e-8, v4-8 ...) or gpu:<model>:<count> (gpu:H100:8)")


def _listed(value: str | None) -> list[str] | None:
    """The ids a ``*_VISIBLE_*`` variable lists; None when it is unset."""
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip() and part.strip() != "-1"]


def _numbered(folder: Path, prefix: str) -> list[int]:
    """The numbers N of the entries ``<prefix>N`` of ``folder`` (none when it cannot be listed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(n[len(prefix):]) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())


def _google_pci_device(root: Path) -> bool:
    base = root / "sys" / "bus" / "pci" / "devices"
    try:
        devices = os.listdir(base)
    except OSError:
        return False
    for name in devices:
        try:
            if (base / name / "vendor").read_text().strip().lower() == _GOOGLE_PCI_VENDOR:
                return True
        except OSError:
            continue
    return False


def _detect_tpu(root: Path, environ: Mapping[str, str]) -> HostAccelerator | None:
    accel = _numbered(root / "dev", "accel")
    if accel:
        chips, where = len(accel), f"{root / 'dev'}/accel{{{','.join(map(str, accel))}}}"
    else:
        groups = _numbered(root / "dev" / "vfio", "")
        tpu_host = "TPU_ACCELERATOR_TYPE" in environ or _google_pci_device(root)
        if not groups or not tpu_host:
            return None
        chips, where = len(groups), f"{root / 'dev' / 'vfio'}/{{{','.join(map(str, groups))}}}"
    source = f"{_plural(chips, 'chip')} from {where}"
    visible = _listed(environ.get("TPU_VISIBLE_CHIPS"))
    if visible:
        chips, source = min(chips, len(visible)), f"{source}, TPU_VISIBLE_CHIPS={environ['TPU_VISIBLE_CHIPS']}"
    kind = environ.get("TPU_ACCELERATOR_TYPE")
    generation = _generation(kind) if kind else None
    source += f", generation from TPU_ACCELERATOR_TYPE={kind}" if kind else ", generation unknown (no TPU_ACCELERATOR_TYPE)"
    return HostAccelerator(AcceleratorKind.TPU, chips, generation, source=source)


def _gpu_model(root: Path) -> str | None:
    """The model of the first GPU the NVIDIA driver describes (``H100`` from ``NVIDIA H100 80GB HBM3``)."""
    base = root / "proc" / "driver" / "nvidia" / "gpus"
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return None
    for bus in buses:
        try:
            text = (base / bus / "information").read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.lower().startswith("model:"):
                words = [w for w in re.split(r"[\s-]+", line.split(":", 1)[1]) if w]
                words = [w for w in words if w.lower() not in ("nvidia", "tesla", "geforce", "rtx")] or words
                return words[0] if words else None
    return None


def _detect_gpu(root: Path, environ: Mapping[str, str]) -> HostAccelerator | None:
    listed = _listed(environ.get("CUDA_VISIBLE_DEVICES"))
    files = _numbered(root / "dev", "nvidia")
    if listed is not None:
        if not listed or not files:
            return None  # hidden (empty), or a variable set on a host without the driver's devices
        devices, source = tuple(listed), f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']}"
    elif files:
        devices, source = tuple(str(n) for n in files), f"{root / 'dev'}/nvidia{{{','.join(map(str, files))}}}"
    else:
        return None
    return HostAccelerator(AcceleratorKind.GPU, len(devices), _gpu_model(root), source=source, devices=devices)


def detect_accelerator(root: str | os.PathLike = "/", environ: Mapping[str, str] | None = None
                       ) -> HostAccelerator | None:
    """This host's accelerator as its device files and environment show it (see the module
    docstring), without opening any device; None on a host without one.

    Args:
        root: the file system root to read ``dev``, ``sys`` and ``proc`` under (tests pass a folder).
        environ: the user's environment (default: ``os.environ``): the variables that
            :mod:`iris.accelerator_env` hides are read as the user set them.
    """
    env = users_environ(os.environ if environ is None else environ)
    base = Path(root)
    return _detect_tpu(base, env) or _detect_gpu(base, env)
