"""``marin.execution.step``: steps and placeholders (defined in :mod:`marin.execution.core`)."""

from marin.execution.core.errors import InvalidStep
from marin.execution.core.placeholders import OutputPath, output_path_of
from marin.execution.core.step import (
           DEV_VERSION,
           UNHASHED,
           Step,
           name_group,
           unhashed_field,
           validate_step_name,
)

__all__ = ["DEV_VERSION", "UNHASHED", "InvalidStep", "OutputPath", "Step", "name_group", "output_path_of",
           "unhashed_field", "validate_step_name"]
