"""A client that runs each call at once, in the caller's own process.

For stores that exist only inside one process (``memory://``): a call run in a process of its own
would write where nobody else can read. It keeps the client contract where a process is not
needed (values, errors as :class:`~fray.types.JobFailed`, environment, captured output, actors);
it cannot outlive, time out, or cancel a call, since the call has finished when ``submit``
returns, and output written to the process's own file descriptors (by a child process) is not
captured.
"""

from __future__ import annotations

import contextlib
import io
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from fray.types import (
    ActorHandle,
    DistributedClient,
    Future,
    JobFailed,
    JobHandle,
    ResourcesLike,
    job_name,
    ray_options_of,
)
from rigging.environ import updated_environ

__all__ = ["DoneJob", "InProcessClient"]


class DoneJob(JobHandle):
    """The handle of a call that already ran: its value or its error, and what it printed."""

    def __init__(self, name: str, value: Any = None, error: BaseException | None = None, output: str = ""):
        self.name = name
        self._value = value
        self._error = error
        self._output = output

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self, grace_s: float | None = None) -> None:
        pass  # it ran to its end when it was submitted

    def logs(self) -> str:
        return self._output


def _call(label: str, fn: Callable[..., Any], args: tuple, kwargs: dict, env: Mapping[str, str] | None,
          what: str | None = None) -> DoneJob:
    """Run ``fn`` now with its output captured; a raise becomes the handle's :class:`JobFailed`."""
    out = io.StringIO()
    with updated_environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            value = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the call's failure, reported through its handle
            tb = traceback.format_exc()
            print(tb, end="", file=out)
            error = JobFailed(f"{what or label} failed: {type(e).__name__}: {e}", remote_traceback=tb)
            error.__cause__ = e
            return DoneJob(label, error=error, output=out.getvalue())
    return DoneJob(label, value=value, output=out.getvalue())


class _InProcessActor(ActorHandle):
    def __init__(self, label: str, cls: type, args: tuple, kwargs: dict, env: Mapping[str, str] | None):
        self._label = label
        self._env = dict(env or {})
        constructed = _call(label, cls, args, kwargs, self._env)
        try:
            self._obj: Any = constructed.result()
            self._error: BaseException | None = None
        except JobFailed as e:
            self._obj, self._error = None, e

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        label = f"{self._label}.{method}"
        if self._error is not None:
            return DoneJob(label, error=self._error)
        return _call(label, getattr(self._obj, method), args, kwargs, self._env)

    def kill(self) -> None:
        self._obj = None
        self._error = JobFailed(f"actor {self._label} was killed")


class InProcessClient(DistributedClient):
    """Runs each submitted call at once in this process; the handle it returns is already done."""

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
               env: Mapping[str, str] | None = None, resources: ResourcesLike = None, **kwargs: Any) -> DoneJob:
        ray_options_of(resources)  # the same check of what was asked as every client makes
        label = job_name(fn, name)
        return _call(label, fn, args, kwargs, env, what=f"job {label}")

    def create_actor(self, cls: type, *args: Any, name: str | None = None, env: Mapping[str, str] | None = None,
                     resources: ResourcesLike = None, **kwargs: Any) -> ActorHandle:
        ray_options_of(resources)
        return _InProcessActor(name or cls.__name__, cls, args, kwargs, env)

    def shutdown(self) -> None:
        pass
