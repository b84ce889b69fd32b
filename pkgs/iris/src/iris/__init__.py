"""iris: what a job needs (resources), where it may run (admission), and multi-host launch."""

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

__all__ = [
    "TPU_TYPES",
    "Admission",
    "AdmissionController",
    "Demand",
    "GpuConfig",
    "MachineCapacity",
    "MultihostEnv",
    "MultihostJob",
    "PlacementStrategy",
    "ResourceConfig",
    "ResourcesTooLarge",
    "TpuConfig",
    "TpuTopology",
    "check_fits",
    "initialize_jax",
    "launch",
    "parse_memory",
]
