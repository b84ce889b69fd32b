"""What a call may change of the process it runs in, put back after it, in a warm process
(:mod:`fray.warm_process`) that runs calls one after another.

Before a call a :class:`ProcessState` is taken; after it, :meth:`ProcessState.restore` puts back
what a call can change globally and a fresh process would not have: environment variables, the
working folder, the random state (``random``, numpy's global one), logging handlers and levels,
the handlers of SIGINT and SIGTERM, JAX's configuration flags. It drops every device buffer the
call left alive (``jax.live_arrays()``; when some are, the process's ``functools`` memos are emptied
first, as a fresh process has them, and what they alone held is not counted) and checks that the device memory in use is back to its
level before the call. What cannot be shown clean is returned as a line: a buffer left alive (some
module may still hold it), memory not given back, a flag that could not be put back. The process
must then not serve another call.

JAX is looked at only when a call imported it; the backend is never started here (on a TPU host,
starting it opens the chip), only asked once a call has started it. When JAX is not yet imported
before a call, a one-shot import watch takes its flags as its import set them, so a call that
imports JAX and then changes a flag has it put back too. (What the call's environment made of the
flags at that import, ``JAX_ENABLE_X64`` say, stays: they are what JAX read.)
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import random
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MEMORY_SLACK_BYTES", "ProcessState"]

MEMORY_SLACK_BYTES = 1 << 20
"""Device memory a call may leave in use beyond its level before the call (allocator rounding)."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _loggers() -> dict[str, tuple[int, list[logging.Handler], bool, bool]]:
    found = {"": (logging.root.level, list(logging.root.handlers), logging.root.propagate, logging.root.disabled)}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            found[name] = (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
    return found


def _jax() -> Any:
    return sys.modules.get("jax")


class _JaxImportWatch(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` until ``jax`` is imported: takes JAX's flags as its import left them."""

    def __init__(self) -> None:
        self.flags: dict[str, Any] | None = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "jax":
            return None
        self.remove()  # the real finders find it; this one sees it once
        spec = importlib.util.find_spec("jax")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_take(module: Any) -> None:
            exec_module(module)
            self.flags = dict(module.config.values)

        loader.exec_module = exec_then_take  # pyright: ignore[reportAttributeAccessIssue] - this spec's loader only
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def _device_bytes_in_use() -> int | None:
    """Bytes in use on this process's devices, or None: JAX not imported, its backend not started,
    or a device that does not say (the CPU)."""
    jax = _jax()
    if jax is None:
        return None
    from jax._src import xla_bridge  # imported already with jax: where it says whether a backend started

    if not xla_bridge.backends_are_initialized():
        return None
    total = 0
    for device in jax.local_devices():
        stats = device.memory_stats()
        if not stats or "bytes_in_use" not in stats:
            return None
        total += int(stats["bytes_in_use"])
    return total


def _clear_memoized() -> None:
    """Empty every ``functools`` memo (``lru_cache``, ``cache``) of the process: a fresh process starts
    with them empty, and one may hold device arrays a call made (a kernel built once per shape keeps
    its tables on the device: splash attention's mask tables), which are the call's, not a leak of
    it. What they held is made again when asked for."""
    for obj in gc.get_objects():
        if isinstance(obj, functools._lru_cache_wrapper):  # noqa: SLF001 - the type of every lru_cache
            with contextlib.suppress(Exception):
                obj.cache_clear()


def _describe_arrays(arrays: list[Any]) -> str:
    shown = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays[:3])
    more = f" and {len(arrays) - 3} more" if len(arrays) > 3 else ""
    return f"{len(arrays)} live array{'s' if len(arrays) != 1 else ''} on the device ({shown}{more})"


@dataclass
class ProcessState:
    """What a call may change, as it was before the call (:meth:`take`)."""

    environ: dict[str, str]
    cwd: str
    random_state: Any
    numpy_random_state: Any
    loggers: dict[str, tuple[int, list[logging.Handler], bool, bool]]
    handlers: dict[int, Any]
    jax_flags: dict[str, Any] | None
    device_bytes: int | None
    jax_import: _JaxImportWatch | None = None
    problems: list[str] = field(default_factory=list)

    @classmethod
    def take(cls) -> ProcessState:
        """The state now (before a call)."""
        jax = _jax()
        numpy = sys.modules.get("numpy")
        watch = None
        if jax is None:
            watch = _JaxImportWatch()
            watch.install()
        return cls(environ=dict(os.environ), cwd=os.getcwd(), random_state=random.getstate(),
                   numpy_random_state=numpy.random.get_state() if numpy is not None else None,
                   loggers=_loggers(), handlers={s: signal.getsignal(s) for s in _SIGNALS},
                   jax_flags=dict(jax.config.values) if jax is not None else None,
                   device_bytes=_device_bytes_in_use(), jax_import=watch)

    def restore(self) -> str | None:
        """Put back what the call changed; None when the process is as clean as before the call,
        else a line saying what the call left that could not be shown clean."""
        self.problems = []
        if self.jax_import is not None:
            self.jax_import.remove()  # a call that imported no JAX: the next call's state takes its own
        self._environment()
        self._logging()
        for sig, handler in self.handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        random.setstate(self.random_state)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy_random_state is not None:
            numpy.random.set_state(self.numpy_random_state)
        if _jax() is not None:
            self._jax_flags()
            self._device()
        return "; ".join(self.problems) or None

    def _environment(self) -> None:
        for name in set(os.environ) - set(self.environ):
            del os.environ[name]
        for name, value in self.environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        try:
            os.chdir(self.cwd)
        except OSError as e:
            self.problems.append(f"its working folder {self.cwd} is gone ({e.strerror})")

    def _logging(self) -> None:
        now = _loggers()
        for name, (level, handlers, propagate, disabled) in now.items():
            logger = logging.root if name == "" else logging.getLogger(name)
            if name in self.loggers:
                level, kept, propagate, disabled = self.loggers[name]
            else:  # made by the call (a library imported): kept as it is, but for the handlers it was given
                kept = [h for h in handlers if isinstance(h, logging.NullHandler)]
            for handler in handlers:
                if handler not in kept:
                    logger.removeHandler(handler)
                    with contextlib.suppress(Exception):
                        handler.close()
            for handler in kept:
                if handler not in logger.handlers:
                    logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled

    def _jax_flags(self) -> None:
        jax = _jax()
        before = self.jax_flags
        if before is None:  # the call imported JAX: its flags as that import set them
            before = self.jax_import.flags if self.jax_import is not None else None
        if before is None:
            self.problems.append("imported JAX where its flags could not be seen as the import set them")
            return
        for name, value in before.items():
            if jax.config.values.get(name, value) != value:
                try:
                    jax.config.update(name, value)
                except Exception as e:  # noqa: BLE001 - a flag that cannot be put back: the process retires
                    self.problems.append(f"changed the JAX flag {name} and it could not be put back ({e})")

    def _device(self) -> None:
        jax = _jax()
        gc.collect()  # buffers only a reference cycle still held are the call's garbage, not a leak
        if jax.live_arrays():  # a memo may hold them (a fresh process has its memos empty): emptied first
            _clear_memoized()
            gc.collect()
        live = list(jax.live_arrays())
        if live:
            self.problems.append(f"left {_describe_arrays(live)}")
            for array in live:
                with contextlib.suppress(Exception):
                    array.delete()
        now = _device_bytes_in_use()
        if now is not None and self.device_bytes is not None and now > self.device_bytes + MEMORY_SLACK_BYTES:
            self.problems.append(f"left {now - self.device_bytes} bytes of device memory in use "
                                 f"({now} now, {self.device_bytes} before it)")
