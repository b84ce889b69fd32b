"""What a job needs: ``ResourceConfig`` and its parts, defined in ``fray.resources`` and re-exported."""

from fray.resources import (
    ANY_REGION,
    TPU_TYPES,
    GpuConfig,
    ResourceConfig,
    TpuConfig,
    TpuTopology,
    parse_memory,
)

__all__ = ["ANY_REGION", "TPU_TYPES", "GpuConfig", "ResourceConfig", "TpuConfig", "TpuTopology", "parse_memory"]
