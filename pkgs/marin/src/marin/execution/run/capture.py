"""Capture the steps a script hands to ``executor_main(...)`` or ``StepRunner().run(...)`` without running them.

``marin run FILE`` and ``marin plan FILE`` use it for files that build their steps only under
``if __name__ == "__main__":``: the block runs inside :func:`capturing`, and the first call that
would run steps hands them over and stops the block instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Captured", "capturing", "offer"]

_state = threading.local()


class Captured(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Raised by :func:`offer` inside :func:`capturing`: carries the steps and ends the script's block."""

    def __init__(self, steps: list[Any]):
        super().__init__("steps captured")
        self.steps = steps


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Within this block, :func:`offer` raises :class:`Captured` instead of returning."""
    previous = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = previous


def offer(steps: list[Any]) -> None:
    """Called by the runners before they run ``steps``: inside :func:`capturing`, hand them over."""
    if getattr(_state, "active", False):
        raise Captured(list(steps))
