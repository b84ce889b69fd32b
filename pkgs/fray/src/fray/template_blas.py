"""BLAS threads in a warm template (:mod:`fray.pool`) and in the calls forked from it.

OpenBLAS (numpy's and scipy's BLAS) starts its worker threads when it loads, so a template that
imported numpy would hold more than one thread and be unsafe to fork (:func:`fray.template_imports.fork_hazard`):
numpy, and everything built on it (pandas, datasets, lm-eval, tokenizers ...), would be imported
again by every call. A template therefore runs with ``OPENBLAS_NUM_THREADS=1``, under which OpenBLAS
starts no thread; each call gets its caller's setting back before its own code runs: the variable
as the caller had it (for the processes the call starts) and, when the template had loaded a BLAS,
as many BLAS threads as OpenBLAS would have chosen under that setting (``threadpoolctl``; OpenBLAS
starts the extra threads then).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["call_blas_threads", "give_call_its_blas_threads", "template_environment"]

BLAS_THREADS = "OPENBLAS_NUM_THREADS"
# The caller's value of BLAS_THREADS while a template runs ("" when it had none).
_CALLER_VALUE = "FRAY_CALLER_OPENBLAS_NUM_THREADS"
# What OpenBLAS reads for its thread count, first found first: a value above 0 counts.
_OPENBLAS_READS = (BLAS_THREADS, "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def template_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment to start a template with: the caller's ``environ``, one BLAS thread."""
    env = dict(environ)
    env[_CALLER_VALUE] = environ.get(BLAS_THREADS, "")
    env[BLAS_THREADS] = "1"
    return env


def call_blas_threads(environ: Mapping[str, str]) -> int:
    """How many threads OpenBLAS starts when it loads under ``environ``: the first of its variables
    set above 0, at most the CPUs this process may use (all of them when none is set)."""
    # The CPUs this process may run on (OpenBLAS counts its affinity mask); all of them where the
    # platform cannot say (macOS has no sched_getaffinity).
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for name in _OPENBLAS_READS:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return min(int(value), cpus)
    return cpus


def give_call_its_blas_threads(call_env: Mapping[str, str]) -> None:
    """In a call just forked from a template: its caller's BLAS setting back, then ``call_env`` (the
    call's own variables) over it, and the loaded BLAS libraries told the thread count that gives.

    Outside a template (no caller value recorded) only ``call_env`` is applied.
    """
    caller = os.environ.pop(_CALLER_VALUE, None)
    if caller is not None:
        if caller:
            os.environ[BLAS_THREADS] = caller
        else:
            os.environ.pop(BLAS_THREADS, None)
    os.environ.update(call_env)
    if caller is None:
        return
    # Imported here: a template imports it before it forks any call (see pool_template), so this
    # finds it loaded; the caller, which never needs it, does not pay for it at import.
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=call_blas_threads(os.environ), user_api="blas")
