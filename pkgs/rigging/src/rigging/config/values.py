"""How a raw value of a setting (from a file or a variable) is read: booleans, seconds, an accelerator."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["ACCELERATOR", "accelerator_value", "parse_bool", "positive_seconds"]


def parse_bool(value: Any) -> bool:
    """``true``/``false`` as YAML or a variable may spell them (``1``, ``yes``, ``on`` ...); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def positive_seconds(value: Any) -> float:
    """A finite number of seconds above 0 (a number, or its text); ValueError otherwise."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    try:
        seconds = float(str(value).strip()) if not isinstance(value, int | float) else float(value)
    except ValueError:
        raise ValueError(f"expected a positive number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return seconds


ACCELERATOR = re.compile(r"auto|none|v\d+[a-z]*-\d+|gpu:[A-Za-z0-9_.-]+(:\d+)?", re.IGNORECASE)
"""What ``accelerator`` may say (checked in full where it is used: ``iris.accelerator.parse_accelerator``)."""


def accelerator_value(value: Any) -> str | None:
    """What ``accelerator`` states (:data:`ACCELERATOR`); None for ``auto``; ValueError otherwise."""
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or not ACCELERATOR.fullmatch(text):
        raise ValueError(f"expected auto, none, a TPU type (v5e-1, v4-8) or gpu:<model>:<count>, got {value!r}")
    return None if text.lower() == "auto" else text
