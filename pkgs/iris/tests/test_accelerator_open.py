"""Opening the accelerator before a step's function runs: a runtime that finds it held is told
apart from any other error, by where it was raised, never by what an error's text says; and a lock
file this user may not open is named for what it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fray.types import JobFailed
from iris.accelerator_open import AcceleratorUnavailable, open_accelerator, unavailable_line
from iris.chip_lock import lock_holder
from testsupport.accelerator import LIBTPU_HELD


def _libtpu_start() -> None:
    raise RuntimeError(LIBTPU_HELD)


def _bad_config() -> None:
    raise ValueError("loss is nan")


def test_a_runtime_that_finds_the_accelerator_held_at_its_start_is_unavailable_and_nothing_else_is() -> None:
    with pytest.raises(AcceleratorUnavailable) as caught:
        open_accelerator(_libtpu_start)
    assert str(caught.value).startswith("Unable to initialize backend 'tpu'") and "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="loss is nan"):
        open_accelerator(_bad_config)
    # As the runner sees the step's job end (fray's JobFailed, from any worker kind).
    raised = JobFailed(f"job chip/t0-abc failed: AcceleratorUnavailable: {caught.value}",
                       remote_traceback=f"Traceback ...\niris.accelerator_open.AcceleratorUnavailable: {caught.value}\n")
    assert unavailable_line(raised) == str(caught.value)
    # The step's own error, whatever its text (libtpu's words, CUDA's, even the type's name), is not.
    own = JobFailed(f"job chip/t0-abc failed: RuntimeError: {LIBTPU_HELD}; all CUDA-capable devices are busy or "
                    "unavailable; job x failed: AcceleratorUnavailable: no",
                    remote_traceback=f"Traceback ...\nRuntimeError: {LIBTPU_HELD}\n")
    assert unavailable_line(own) is None
    assert unavailable_line(ValueError("busy or unavailable")) is None


def _holder_as_another_user(lock: str) -> str | None:
    """``lock_holder(lock).describe()`` as a user that may not open ``lock`` (root: forked as nobody)."""
    if os.geteuid() != 0:
        os.chmod(lock, 0)
        found = lock_holder(lock)
        return found.describe() if found is not None else None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, reading the holder; nothing but the answer leaves it
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            found = lock_holder(lock)
            os.write(write, (found.describe() if found is not None else "").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read().decode()
    os.waitpid(pid, 0)
    return said or None


def test_a_lock_file_this_user_may_not_open_is_named_as_another_users_or_left_over(tmp_path: Path) -> None:
    lock = tmp_path / "libtpu_lockfile"
    lock.write_text("")
    lock.chmod(0o600)  # as libtpu leaves it
    said = _holder_as_another_user(str(lock))
    assert said == (f"{lock} is held by a process of another user, or left over: remove {lock} "
                    "if no TPU process runs")
    assert lock_holder(str(tmp_path / "absent")) is None  # no file: nobody opened the chip
