"""Admission: running jobs never ask for more CPUs, memory or accelerators together than a host has.

A host's accelerator (:class:`~iris.accelerator.HostAccelerator`) is shared in *slots*: a job
asking for any of it takes whole slots (:meth:`MachineCapacity.total`), and an admitted job knows
which (:attr:`Admission.slots`), to be given only their devices.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import psutil

from iris.accelerator import AcceleratorKind, HostAccelerator
from iris.cluster import ResourceConfig

__all__ = [
    "Admission",
    "AdmissionController",
    "Demand",
    "Ledger",
    "MachineCapacity",
    "ResourcesTooLarge",
    "check_fits",
    "check_fits_cluster",
]


class ResourcesTooLarge(ValueError):
    """A job needs more than the machine (or any host of the cluster) has at all."""


@dataclass(frozen=True)
class MachineCapacity:
    """What one host offers.

    Attributes:
        cpus: CPU cores.
        memory: bytes of memory.
        gpus: GPUs.
        tpu_chips: TPU chips.
        accelerator: the host's accelerator, when jobs on it share it in slots (its devices are
            then ``gpus`` or ``tpu_chips``, which it sets); None: devices are counted one by one.
    """

    cpus: float
    memory: int
    gpus: int = 0
    tpu_chips: int = 0
    accelerator: HostAccelerator | None = None

    def __post_init__(self) -> None:
        if self.accelerator is not None:
            tpu = self.accelerator.kind is AcceleratorKind.TPU
            object.__setattr__(self, "tpu_chips", self.accelerator.count if tpu else 0)
            object.__setattr__(self, "gpus", 0 if tpu else self.accelerator.count)
        if not self.cpus > 0:
            raise ValueError(f"cpus must be > 0, got {self.cpus!r}")
        if self.memory < 0:
            raise ValueError(f"memory must be >= 0, got {self.memory!r}")
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus!r}")
        if self.tpu_chips < 0:
            raise ValueError(f"tpu_chips must be >= 0, got {self.tpu_chips!r}")

    @classmethod
    def detect(cls, accelerator: HostAccelerator | None = None) -> MachineCapacity:
        """This machine: the CPUs this process may use, its total memory and ``accelerator``
        (found by :func:`iris.accelerator.detect_accelerator` or stated by the configuration)."""
        return cls(cpus=float(len(os.sched_getaffinity(0))), memory=int(psutil.virtual_memory().total),
                   accelerator=accelerator)

    def as_demand(self) -> Demand:
        return Demand(cpus=self.cpus, memory=self.memory, gpus=self.gpus, tpu_chips=self.tpu_chips)

    def slots_needed(self, resources: ResourceConfig) -> int:
        """Slots of the accelerator a job asking ``resources`` takes here (0 without a shared accelerator).

        Raises:
            ResourcesTooLarge: it asks for an accelerator this host does not have, or more of it.
        """
        if self.accelerator is None:
            return 0
        try:
            return self.accelerator.slots_needed(resources)
        except ValueError as e:
            raise ResourcesTooLarge(f"{e}; ask for what this host has, leave resources= unset to use its "
                                    "accelerator, or run it on a cluster (--backend ray)") from None

    def per_host(self, resources: ResourceConfig) -> Demand:
        """What ``resources`` takes of each of its hosts, its accelerator in whole slots."""
        demand = Demand.per_host(resources)
        if self.accelerator is None or resources.accelerator is None:
            return demand
        devices = self.slots_needed(resources) * self.accelerator.slot_size
        if self.accelerator.kind is AcceleratorKind.TPU:
            return Demand(demand.cpus, demand.memory, 0, devices)
        return Demand(demand.cpus, demand.memory, devices, 0)

    def total(self, resources: ResourceConfig) -> Demand:
        """What ``resources`` takes here with all its hosts' processes on this one (local runs)."""
        if self.accelerator is None or resources.accelerator is None:
            return Demand.total(resources)
        whole = Demand.per_host(resources).scaled(resources.num_hosts)
        # Slots are counted over all the job's chips together: they all run here.
        one = self.per_host(resources)
        return Demand(whole.cpus, whole.memory, one.gpus, one.tpu_chips)


@dataclass(frozen=True)
class Demand:
    """An amount of each resource (what a job asks of one host, or what a host has in use).

    Attributes:
        cpus: CPU cores.
        memory: bytes.
        gpus: GPUs.
        tpu_chips: TPU chips.
    """

    cpus: float = 0.0
    memory: int = 0
    gpus: int = 0
    tpu_chips: int = 0

    @classmethod
    def per_host(cls, resources: ResourceConfig) -> Demand:
        """What ``resources`` asks of each of its hosts."""
        return cls(cpus=float(resources.cpus), memory=resources.memory or 0,
                   gpus=resources.gpus_per_host, tpu_chips=resources.tpu_chips_per_host)

    @classmethod
    def total(cls, resources: ResourceConfig) -> Demand:
        """What ``resources`` asks when all its hosts' processes run on one machine (local runs)."""
        return cls.per_host(resources).scaled(resources.num_hosts)

    def scaled(self, n: int) -> Demand:
        return Demand(self.cpus * n, self.memory * n, self.gpus * n, self.tpu_chips * n)

    def __add__(self, other: Demand) -> Demand:
        return Demand(self.cpus + other.cpus, self.memory + other.memory,
                      self.gpus + other.gpus, self.tpu_chips + other.tpu_chips)

    def __sub__(self, other: Demand) -> Demand:
        return Demand(self.cpus - other.cpus, self.memory - other.memory,
                      self.gpus - other.gpus, self.tpu_chips - other.tpu_chips)

    def _over(self, capacity: Demand) -> list[tuple[str, float, float]]:
        """(resource, wanted, had) for each resource where this exceeds ``capacity``."""
        pairs = (("cpus", self.cpus, capacity.cpus), ("memory", self.memory, capacity.memory),
                 ("gpus", self.gpus, capacity.gpus), ("tpu_chips", self.tpu_chips, capacity.tpu_chips))
        return [(field, want, have) for field, want, have in pairs if want > have + 1e-9]

    def shortfalls(self, capacity: Demand) -> list[str]:
        """Each resource where this exceeds ``capacity``, as ``"cpus: 64 > 2"``."""
        return [f"{field}: {want:g} > {have:g}" for field, want, have in self._over(capacity)]

    def fits_in(self, capacity: Demand) -> bool:
        # The simulator asks this of every host for every placement: no message is formatted here.
        return not self._over(capacity)


class Ledger:
    """The book of one host: its capacity and what admitted jobs use (not thread-safe)."""

    def __init__(self, capacity: MachineCapacity):
        self.capacity = capacity
        self.used = Demand()
        self._limit = capacity.as_demand()  # asked on every can_take: made once

    @property
    def free(self) -> Demand:
        return self._limit - self.used

    def can_take(self, demand: Demand) -> bool:
        return (self.used + demand).fits_in(self._limit)

    def take(self, demand: Demand) -> None:
        if not self.can_take(demand):
            raise RuntimeError(f"over capacity: {', '.join((self.used + demand).shortfalls(self._limit))}")
        self.used = self.used + demand

    def give_back(self, demand: Demand) -> None:
        self.used = self.used - demand


def check_fits(resources: ResourceConfig, capacity: MachineCapacity, *, what: str = "this machine",
               demand: Demand | None = None) -> None:
    """Raise :class:`ResourcesTooLarge` if ``resources`` can never run on ``capacity``.

    Args:
        demand: the amount to check (default: everything the job asks, all hosts on one machine).
    """
    demand = demand if demand is not None else capacity.total(resources)
    shortfalls = demand.shortfalls(capacity.as_demand())
    if shortfalls:
        raise ResourcesTooLarge(
            f"the job needs more than {what} has ({'; '.join(shortfalls)}); "
            f"ask for less, or run it on a cluster (--backend ray)"
        )


def check_fits_cluster(resources: ResourceConfig, hosts: list[MachineCapacity], *, what: str = "the cluster") -> None:
    """Raise :class:`ResourcesTooLarge` if ``resources`` can never run on a cluster of ``hosts``.

    Each of the job's :attr:`~iris.cluster.ResourceConfig.num_hosts` processes needs a host of its
    own (one bundle per host, ``STRICT_SPREAD``) that has everything one process asks for.
    """
    per_host = Demand.per_host(resources)
    fitting = [h for h in hosts if per_host.fits_in(h.as_demand())]
    if len(fitting) >= resources.num_hosts:
        return
    if not fitting:
        closest = min(hosts, key=lambda h: (len(per_host.shortfalls(h.as_demand())), -h.cpus, -h.memory), default=None)
        why = "; ".join(per_host.shortfalls(closest.as_demand())) if closest else "it has no hosts"
        raise ResourcesTooLarge(f"no host of {what} ({len(hosts)} hosts) has what one process needs ({why}); "
                                "ask for less, or add bigger hosts")
    raise ResourcesTooLarge(f"the job spans {resources.num_hosts} hosts but only {len(fitting)} of {what}'s "
                            f"{len(hosts)} hosts can take one of its processes; ask for fewer hosts, or add hosts")


class Admission:
    """Resources held by one admitted job; release them with :meth:`release` or ``with``.

    Attributes:
        demand: what it holds.
        slots: the slots of the host's accelerator it holds (their devices are its own), in order.
    """

    def __init__(self, controller: AdmissionController, demand: Demand, slots: tuple[int, ...] = ()):
        self._controller = controller
        self.demand = demand
        self.slots = slots
        self._released = False

    def release(self) -> None:
        """Give the resources back (idempotent)."""
        if not self._released:
            self._released = True
            self._controller._release(self.demand, self.slots)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class AdmissionController:
    """Thread-safe admission of jobs on one machine.

    A job is admitted only while everything admitted and not yet released fits the machine's
    capacity together. A job that could never fit is rejected by :meth:`check_fits` (call it when
    planning, before anything runs) instead of waiting forever.

    Args:
        capacity: the machine; default: :meth:`MachineCapacity.detect`.
    """

    def __init__(self, capacity: MachineCapacity | None = None):
        self.capacity = capacity if capacity is not None else MachineCapacity.detect()
        self._ledger = Ledger(self.capacity)
        self._changed = threading.Condition()
        accelerator = self.capacity.accelerator
        self._free_slots = list(range(accelerator.slots)) if accelerator is not None else []

    @property
    def accelerator_in_use(self) -> bool:
        """Whether an admitted job holds a slot of the host's accelerator now."""
        accelerator = self.capacity.accelerator
        with self._changed:
            return accelerator is not None and len(self._free_slots) < accelerator.slots

    @property
    def in_use(self) -> Demand:
        with self._changed:
            return self._ledger.used

    def check_fits(self, resources: ResourceConfig) -> None:
        """Raise :class:`ResourcesTooLarge` if ``resources`` exceeds the whole machine."""
        check_fits(resources, self.capacity)

    def try_admit(self, resources: ResourceConfig) -> Admission | None:
        """Admit the job now if it fits next to what runs; else None.

        Raises:
            ResourcesTooLarge: it would never fit.
        """
        self.check_fits(resources)
        demand = self.capacity.total(resources)
        with self._changed:
            if not self._ledger.can_take(demand):
                return None
            return self._take(resources, demand)

    def _take(self, resources: ResourceConfig, demand: Demand) -> Admission:
        """Take ``demand`` (it fits) and the lowest free slots it needs; under the lock."""
        self._ledger.take(demand)
        wanted = self.capacity.slots_needed(resources)
        slots, self._free_slots = tuple(self._free_slots[:wanted]), self._free_slots[wanted:]
        return Admission(self, demand, slots)

    def admit(self, resources: ResourceConfig, timeout: float | None = None) -> Admission:
        """Wait until the job fits next to what runs, then admit it.

        Raises:
            ResourcesTooLarge: it would never fit.
            TimeoutError: it did not fit within ``timeout`` seconds.
        """
        self.check_fits(resources)
        demand = self.capacity.total(resources)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self._ledger.can_take(demand):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no room for {demand} within {timeout}s (in use: {self._ledger.used})")
                self._changed.wait(remaining)
            return self._take(resources, demand)

    def _release(self, demand: Demand, slots: tuple[int, ...] = ()) -> None:
        with self._changed:
            self._ledger.give_back(demand)
            self._free_slots = sorted(self._free_slots + list(slots))
            self._changed.notify_all()
