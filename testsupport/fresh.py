"""A test's body called in a fresh interpreter (``spawn``): for tests whose cost grows with what the
test process has imported.

A ``marin run`` recorded in the test's process (:mod:`testsupport.noop_inprocess`) looks at every
module in ``sys.modules`` (it drops the experiment's, lists the rest's files for its no-op record):
a pytest worker holds JAX and whatever the tests before it loaded, where a fresh ``marin`` process
holds a few hundred modules. In an interpreter of its own, a test of hundreds of commands asks what
a fresh process asks, and costs the same whichever tests its worker ran first.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

__all__ = ["call_in_fresh_interpreter"]


def call_in_fresh_interpreter(file: str, function: str, *args: Any) -> Any:
    """``function(*args)`` of the module at ``file``, imported again in a new interpreter (with this
    one's ``sys.path`` and working folder): its result, or the exception it raised (the child's
    traceback as its cause)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_call, os.path.abspath(file), function, args).result()


def _call(file: str, function: str, args: tuple[Any, ...]) -> Any:
    name = "_fresh_" + os.path.splitext(os.path.basename(file))[0]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return getattr(module, function)(*args)
