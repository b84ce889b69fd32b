"""The core's errors: a step or a config that cannot be part of a graph."""

from __future__ import annotations

__all__ = ['InvalidStep', 'UnserializableConfig']


class InvalidStep(ValueError):
    """A step is malformed: bad name, unimportable function, unserializable config."""


class UnserializableConfig(InvalidStep):
    """A config holds a value with no canonical encoding; the message names the field."""
