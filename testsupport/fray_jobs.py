"""Small importable jobs and actors that exercise a ``DistributedClient`` (used by contract tests).

They live in an installed package (the workspace root's ``testsupport``), not in a test module,
so that any worker (a spawned process, a process forked from a warm template, a Ray worker) can
import them by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psutil

__all__ = [
    "Counter",
    "FailingActor",
    "add",
    "die_hard",
    "echo_env",
    "import_module",
    "import_modules",
    "inspect_state",
    "kill_parent_once",
    "leave_state_behind",
    "loaded",
    "main_file",
    "print_lines",
    "raise_value_error",
    "segfault",
    "sleep_then_return",
    "spawn_grandchild_and_wait",
    "submit_with_grandchild",
    "square",
]


def add(a: int, b: int, *, scale: int = 1) -> int:
    """Return ``(a + b) * scale``."""
    return (a + b) * scale


def square(x: int) -> int:
    """Return ``x * x``."""
    return x * x


def raise_value_error(message: str) -> None:
    """Raise ``ValueError(message)``."""
    raise ValueError(message)


def die_hard(code: int, last_words: str = "") -> None:
    """Leave the process at once with exit code ``code``, reporting nothing (``last_words`` go to
    its stderr first)."""
    if last_words:
        print(last_words, file=sys.stderr, flush=True)
    os._exit(code)


def echo_env(name: str) -> str | None:
    """Return the environment variable ``name`` as the job sees it."""
    return os.environ.get(name)


def sleep_then_return(seconds: float, value: object) -> object:
    """Sleep, then return ``value``."""
    time.sleep(seconds)
    return value


def print_lines(n: int, delay: float = 0.0) -> int:
    """Print ``line i`` for i < n to stdout and one line to stderr, then return n."""
    for i in range(n):
        print(f"line {i}")
        time.sleep(delay)
    print("to stderr", file=sys.stderr)
    # A grandchild's output is part of the job's output too.
    subprocess.run([sys.executable, "-c", "print('from grandchild')"], check=True)
    return n


def spawn_grandchild_and_wait(pid_file: str) -> None:
    """Start a long-sleeping grandchild, write its pid to ``pid_file``, then wait forever."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    tmp = pid_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(child.pid))
    os.replace(tmp, pid_file)
    time.sleep(600)


def submit_with_grandchild(client: Any, pid_file: str) -> tuple[Any, psutil.Process]:
    """Submit :func:`spawn_grandchild_and_wait` through ``client`` and wait for its subprocess:
    (the job's handle, the subprocess)."""
    handle = client.submit(spawn_grandchild_and_wait, pid_file)
    deadline = time.monotonic() + 60
    while not os.path.exists(pid_file):
        assert time.monotonic() < deadline, "grandchild never started"
        time.sleep(0.1)
    grandchild = psutil.Process(int(open(pid_file).read()))
    assert grandchild.is_running()
    return handle, grandchild


def kill_parent_once(marker: str) -> str:
    """On the first attempt, kill the worker that runs this job (as a lost host would); then succeed.

    ``marker`` is a file recording that the first attempt happened.
    """
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("attempt 1")
        os.kill(os.getppid(), 9)
        time.sleep(60)
    return "survived"


class Counter:
    """A counter actor."""

    def __init__(self, start: int = 0):
        self.value = start

    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def fail(self) -> None:
        raise RuntimeError(f"counter at {self.value} refuses")


class FailingActor:
    """An actor whose constructor raises."""

    def __init__(self) -> None:
        raise RuntimeError("cannot construct")

    def ping(self) -> str:
        return "pong"


_LEFT_BEHIND: str | None = None


def leave_state_behind(value: str) -> int:
    """Set a module global and start a thread that never ends; return this process's pid."""
    import threading

    global _LEFT_BEHIND
    _LEFT_BEHIND = value
    threading.Thread(target=time.sleep, args=(3600,), name="left-behind", daemon=True).start()
    return os.getpid()


def inspect_state() -> tuple[str | None, list[str], int]:
    """(the module global of :func:`leave_state_behind`, live thread names, this pid)."""
    import threading

    return _LEFT_BEHIND, sorted(t.name for t in threading.enumerate()), os.getpid()


def segfault() -> None:
    """Crash the process in native code (SIGSEGV)."""
    import ctypes

    ctypes.string_at(0)


def loaded(module: str) -> tuple[bool, int]:
    """(whether ``module`` was imported before this call, the parent pid of this process)."""
    return module in sys.modules, os.getppid()


def blas_state() -> dict[str, Any]:
    """What this process finds of numpy's BLAS: whether numpy was imported before this call,
    ``OPENBLAS_NUM_THREADS``, OpenBLAS's thread count (threadpoolctl), the parent pid."""
    had_numpy = "numpy" in sys.modules
    import numpy  # noqa: F401 - imported here: whether it was loaded already is what is asked
    from threadpoolctl import threadpool_info

    threads = [info["num_threads"] for info in threadpool_info() if info["internal_api"] == "openblas"]
    return {"had_numpy": had_numpy, "variable": os.environ.get("OPENBLAS_NUM_THREADS"), "openblas_threads": threads,
            "parent": os.getppid()}


def import_module(module: str, folder: str | None = None) -> tuple[bool, int]:
    """Import ``module`` (from ``folder``, put first on ``sys.path``, if given); return :func:`loaded`
    as it was before the import."""
    import importlib

    before = loaded(module)
    if folder is not None:
        sys.path.insert(0, folder)
    importlib.import_module(module)
    return before


def main_file() -> str | None:
    """The file of this process's ``__main__`` module (the caller's script, as spawn imports it)."""
    return getattr(sys.modules["__main__"], "__file__", None)


def import_modules(modules: list[str]) -> None:
    """Import each of ``modules``."""
    import importlib

    for module in modules:
        importlib.import_module(module)
