"""iris: what a job needs (resources), where it may run (admission, the host's accelerator), and
multi-host launch.

Each name loads its module on first use (:mod:`rigging.lazy`): finding the host's accelerator
(:mod:`iris.accelerator`) never pays for admission's or launch's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rigging.lazy import lazy_getattr

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator, detect_accelerator
    from iris.admission import (
        Admission,
        AdmissionController,
        Demand,
        MachineCapacity,
        ResourcesTooLarge,
        check_fits,
    )
    from iris.cluster import TPU_TYPES, GpuConfig, ResourceConfig, TpuConfig, TpuTopology, parse_memory
    from iris.multihost import MultihostEnv, MultihostJob, PlacementStrategy, initialize_jax, launch

_WHERE = {
    **dict.fromkeys(("HostAccelerator", "detect_accelerator"), "iris.accelerator"),
    **dict.fromkeys(("Admission", "AdmissionController", "Demand", "MachineCapacity", "ResourcesTooLarge",
                     "check_fits"), "iris.admission"),
    **dict.fromkeys(("TPU_TYPES", "GpuConfig", "ResourceConfig", "TpuConfig", "TpuTopology", "parse_memory"),
                    "iris.cluster"),
    **dict.fromkeys(("MultihostEnv", "MultihostJob", "PlacementStrategy", "initialize_jax", "launch"),
                    "iris.multihost"),
}

__all__ = [
    "TPU_TYPES",
    "Admission",
    "AdmissionController",
    "Demand",
    "GpuConfig",
    "HostAccelerator",
    "MachineCapacity",
    "MultihostEnv",
    "MultihostJob",
    "PlacementStrategy",
    "ResourceConfig",
    "ResourcesTooLarge",
    "TpuConfig",
    "TpuTopology",
    "check_fits",
    "detect_accelerator",
    "initialize_jax",
    "launch",
    "parse_memory",
]

__getattr__ = lazy_getattr(__name__, _WHERE)
