"""A setting that names one of a few ways of computing (remat policy, attention kernel, loss
implementation): an enum whose values are the names a config or command line gives. Importing
this module does not import JAX."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

__all__ = ["Choice"]

_C = TypeVar("_C", bound="Choice")


class Choice(enum.Enum):
    """Base of such enums; each has an ``AUTO`` member and says which setting it is (:meth:`setting`)."""

    @classmethod
    def setting(cls) -> str:
        """The setting's name, as errors name it (``"remat"``)."""
        raise NotImplementedError

    @classmethod
    def parse(cls: type[_C], value: Any) -> _C:
        """``value`` as a member (its string value too; None is ``AUTO``).

        Raises:
            ValueError: ``value`` names no member (the message lists them).
        """
        if value is None:
            return cls("auto")
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{cls.setting()} must be one of {[c.value for c in cls]}, got {value!r}") from None
