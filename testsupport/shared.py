"""Folders built once per test session and shared by every pytest process of it (xdist workers too).

A session fixture runs once per *process*; under ``pytest -n`` each worker is a process, so an
expensive fixture (a trained model, a built store) would be built once per worker. :func:`build_once`
builds it once for the whole session instead: the first worker to ask builds it under a file lock in
the folder all workers share (the parent of their base temporary folders), the others wait and
reuse it. Callers that change what they get must work on a copy (``shutil.copytree``).
"""

from __future__ import annotations

import os
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

__all__ = ["build_once", "session_root"]

_DONE = ".built"
_FAILED = ".failed"


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder every process of this pytest session sees (xdist: the workers' parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``<session root>/shared-<name>``, made by ``build(folder)`` in the first process that asks.

    A build that fails is not tried again by the other processes: each of them fails with the first
    one's error (a second try would cost as much and fail the same way).
    """
    root = session_root(tmp_path_factory)
    folder = root / f"shared-{name}"
    with FileLock(str(root / f"shared-{name}.lock")):
        failed = folder / _FAILED
        if failed.exists():
            raise AssertionError(f"building the shared {name!r} failed in another test process:\n{failed.read_text()}")
        if not (folder / _DONE).exists():
            if folder.exists():  # a build cut short (the process was killed): start over
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            try:
                build(folder)
            except BaseException:
                failed.write_text(traceback.format_exc())
                raise
            (folder / _DONE).touch()
    return folder
