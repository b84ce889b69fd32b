"""Opening the accelerator before a step's function runs, so that a runtime that finds it held is
told apart from a step that fails for its own reasons.

A process that computes on the accelerator opens it once, when its runtime starts (JAX's backends:
libtpu takes its lock file then, a GPU in exclusive mode is claimed). The step's process does that
first (:func:`open_accelerator`), before the step's function is called: if the runtime finds the
accelerator held by another process (:func:`iris.chip_lock.busy_error` reads its error), the
process raises :class:`AcceleratorUnavailable`, which the runner reads as a wait, not a failure
(:func:`unavailable_line`). An exception the step's function raises is its own failure, whatever
its text says: CUDA's "busy or unavailable" also means a faulted GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iris.chip_lock import busy_error

__all__ = ["AcceleratorUnavailable", "open_accelerator", "open_jax", "unavailable_line"]


class AcceleratorUnavailable(RuntimeError):
    """The step's process could not open the accelerator before its function ran: another process
    holds it. Its message is the runtime's line that said so."""


_RAISED = f"{AcceleratorUnavailable.__name__}: "
"""How the error of a job whose call raised :class:`AcceleratorUnavailable` goes on after its first
``failed: `` (fray's ``JobFailed``: ``<job> failed: <Type>: <message>``); a step's own exception
names its own type there."""


def open_jax() -> None:
    """Start JAX's backends as a step's computation would, joining its multi-host job first (that
    must come before anything opens a backend); nothing where JAX is not installed."""
    try:
        import jax  # the runtime that opens the accelerator; optional in this package
    except ImportError:
        return
    from iris.multihost import initialize_jax  # fray's clients: only for a process that opens the accelerator

    if not jax.distributed.is_initialized():
        initialize_jax()
    jax.devices()


def open_accelerator(opener: Callable[..., Any], *args: Any) -> None:
    """Call ``opener(*args)``, the runtime's start; its error that says another process holds the
    accelerator is raised as :class:`AcceleratorUnavailable` (any other error as it is)."""
    try:
        opener(*args)
    except Exception as e:
        text = "\n".join(str(x) for x in _chain(e))
        line = busy_error(text)
        if line is None:
            raise
        raise AcceleratorUnavailable(line) from e


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and the exceptions it was raised from or during."""
    seen: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and cause not in seen:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def unavailable_line(error: BaseException) -> str | None:
    """The runtime's line when ``error`` (a job's error as its caller sees it) is the step's process
    having raised :class:`AcceleratorUnavailable` before the step's function ran; None for any other."""
    if isinstance(error, AcceleratorUnavailable):
        return str(error)
    first = str(error).splitlines()[0] if str(error) else ""
    _, failed, rest = first.partition(" failed: ")
    return rest[len(_RAISED):].strip() if failed and rest.startswith(_RAISED) else None
