"""The interfaces every backend implements: futures, job handles, actors and the client; and
``ResourceConfig`` (from :mod:`fray.resources`), the request type every backend reads."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from fray.resources import ANY_REGION, ResourceConfig

__all__ = [
    "ANY_REGION",
    "ActorHandle",
    "DistributedClient",
    "Future",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "RayOptionsLike",
    "RemoteError",
    "ResourceConfig",
    "ResourcesLike",
    "job_name",
    "ray_options_of",
]


class JobFailed(RuntimeError):
    """A submitted call raised, or the process running it died.

    Attributes:
        remote_traceback: the traceback printed where the call ran, when there was one.
        exitcode: the exit code (negative: the signal) of a process that died without a word.
        worker_lost: the worker or node running the call was lost (crashed, killed, preempted),
            as opposed to the call raising.
    """

    def __init__(self, message: str, remote_traceback: str | None = None, exitcode: int | None = None,
                 worker_lost: bool = False):
        super().__init__(message)
        self.remote_traceback = remote_traceback
        self.exitcode = exitcode
        self.worker_lost = worker_lost

    @property
    def process_died(self) -> bool:
        """True when the call did not raise: its process died or its worker was lost."""
        return self.exitcode is not None or self.worker_lost

    def __reduce__(self):
        # Keep the extra fields when the error crosses a process boundary (Ray pickles it).
        return (type(self), (self.args[0], self.remote_traceback, self.exitcode, self.worker_lost))


RemoteError = JobFailed


PREEMPTED_EXIT_CODE = 75
"""Exit status of a process whose work was preempted and can be resumed (EX_TEMPFAIL: run it again)."""


class Preempted(Exception):
    """The work was preempted (SIGTERM, a host reclaimed) after saving what it had; run it again.

    A worker that catches it ends its process with :attr:`exit_code`, as a lost host would end it,
    so whoever started the call retries it rather than reporting a failure.
    """

    exit_code = PREEMPTED_EXIT_CODE


class JobCancelled(RuntimeError):
    """The call was cancelled before it finished."""


@runtime_checkable
class RayOptionsLike(Protocol):
    """Anything that can say which Ray options it needs (iris's ``ResourceConfig`` does)."""

    def to_ray_options(self) -> dict[str, Any]:
        """Return keyword arguments for Ray's ``.options(...)``."""
        ...


ResourcesLike = RayOptionsLike | Mapping[str, Any] | None


def ray_options_of(resources: ResourcesLike) -> dict[str, Any]:
    """Translate what a caller passed as ``resources`` into a dict of Ray options.

    fray knows nothing of iris: it accepts any object with ``to_ray_options()``, a mapping of Ray
    options (``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ``max_retries``,
    ``scheduling_strategy`` ...), or None.

    Raises:
        TypeError: ``resources`` is none of those.
    """
    if resources is None:
        return {}
    if isinstance(resources, RayOptionsLike):
        return dict(resources.to_ray_options())
    if isinstance(resources, Mapping):
        return dict(resources)
    raise TypeError(
        f"resources must have to_ray_options() or be a mapping of Ray options, got {type(resources).__name__}"
    )


def job_name(fn: Callable[..., Any], name: str | None) -> str:
    """The name a submitted call goes by: ``name`` if given, else the function's own name."""
    return name or getattr(fn, "__name__", "job")


class Future(abc.ABC):
    """The eventual value of one call."""

    @abc.abstractmethod
    def done(self) -> bool:
        """True once the call finished (returned, raised, died or was cancelled)."""

    @abc.abstractmethod
    def result(self, timeout: float | None = None) -> Any:
        """Wait for and return the value.

        Raises:
            JobFailed: the call raised or its process died.
            JobCancelled: the call was cancelled.
            TimeoutError: ``timeout`` seconds passed first.
        """

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the call; a no-op once it is done."""


class JobHandle(Future):
    """A handle to one submitted function call, with its captured output."""

    name: str

    @abc.abstractmethod
    def cancel(self, grace_s: float | None = None) -> None:
        """Stop the call and what it started; a no-op once it is done.

        Args:
            grace_s: seconds the call may take to end after it is asked to (SIGTERM: a training
                step commits a checkpoint) before it is killed; 0 kills it at once (it must not
                write anything more); None: the handle's default.
        """

    @abc.abstractmethod
    def logs(self) -> str:
        """Everything the job wrote to stdout and stderr so far (one interleaved stream)."""

    def iter_logs(self, poll_interval: float = 0.2) -> Iterator[str]:
        """Yield the job's output in chunks as it is written, until the job is done."""
        sent = 0
        while True:
            finished = self.done()
            text = self.logs()
            if len(text) > sent:
                yield text[sent:]
                sent = len(text)
            if finished:
                return
            time.sleep(poll_interval)


class ActorHandle(abc.ABC):
    """A live object in another process; ``actor.method(*args)`` returns a :class:`Future`."""

    @abc.abstractmethod
    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        """Call ``method`` on the remote object; calls run one at a time, in submission order."""

    @abc.abstractmethod
    def kill(self) -> None:
        """End the actor's process; pending calls fail."""

    def __getattr__(self, method: str) -> Callable[..., Future]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)


class DistributedClient(abc.ABC):
    """Submits functions to run elsewhere and returns handles to them."""

    @abc.abstractmethod
    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> JobHandle:
        """Run ``fn(*args, **kwargs)`` elsewhere and return a handle at once.

        Args:
            fn: the function; it and its arguments are sent with cloudpickle.
            name: a name for logs and dashboards (default: the function's name).
            env: environment variables set for the call before ``fn`` is unpickled.
            resources: what the call needs (see :func:`ray_options_of`).
        """

    @abc.abstractmethod
    def create_actor(
        self,
        cls: type,
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
        **kwargs: Any,
    ) -> ActorHandle:
        """Construct ``cls(*args, **kwargs)`` in a process of its own and return a handle to it."""

    def map(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        env: Mapping[str, str] | None = None,
        resources: ResourcesLike = None,
    ) -> list[Any]:
        """Run ``fn`` over ``items`` in parallel; return the results in order.

        If one call fails, the others are cancelled and its :class:`JobFailed` is raised.
        """
        handles = [self.submit(fn, item, env=env, resources=resources) for item in items]
        try:
            return [h.result() for h in handles]
        except BaseException:
            for h in handles:
                h.cancel()
            raise

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Cancel what is still running and release what the client holds."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
