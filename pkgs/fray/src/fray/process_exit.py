"""How a process fray started ends: with ``os._exit``, after multiprocessing's own clean-up.

fray's job, actor, warm-worker and template processes end with ``os._exit`` (no atexit hook, no
thread left running, no buffered stream of the caller's may hold them up). That skips what
multiprocessing does when a process ends: each semaphore a process made (``multiprocessing.Lock``,
``Queue``, ``Event``; tqdm makes one for its first progress bar, as Hugging Face's libraries show
them) is unlinked by a finalizer, and only then forgotten by the resource tracker the processes of
one run share. Skipped, every such semaphore is left to the tracker, which says at the run's end
``resource_tracker: There appear to be N leaked semaphore objects`` (one per worker that made one:
six on a 13-core host whose data steps ran six shard workers). :func:`exit_process` runs those
finalizers first, as a process multiprocessing started would at its end.
"""

from __future__ import annotations

import multiprocessing.util
import os
from typing import NoReturn

__all__ = ["exit_process"]


def exit_process(code: int) -> NoReturn:
    """Run multiprocessing's finalizers of this process, then ``os._exit(code)``.

    Only those of priority 0 and above, as ``multiprocessing``'s own exit runs first (semaphores,
    pools, a queue's close; not the joining of a queue's feeder thread); each runs only in the
    process that made it, so a forked worker never unlinks its template's.
    """
    # The private entry point of the standard library's exit hook (Python 3.8-3.13): the clean-up
    # is multiprocessing's own, not a copy of it.
    multiprocessing.util._run_finalizers(0)  # pyright: ignore[reportAttributeAccessIssue]
    os._exit(code)
