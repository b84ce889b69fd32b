"""What goes wrong with a harness task before a model is asked anything (no lm_eval imported here,
so a command line can tell these apart from its own errors cheaply)."""

from __future__ import annotations

__all__ = ["TaskDataUnavailable", "UnknownTask"]


class TaskDataUnavailable(FileNotFoundError):
    """A task's dataset is neither on this machine nor obtainable (one line naming task and dataset)."""


class UnknownTask(ValueError):
    """A task spec that is no task, group or tag name and no YAML file."""
