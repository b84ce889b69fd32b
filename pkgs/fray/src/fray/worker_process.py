"""Starting a long-lived local worker process: a fresh interpreter (nothing inherited by fork) in a
session of its own, joined to its caller by a socket, told how to become like the caller.

Both of fray's long-lived workers start so: the warm pool's template (:mod:`fray.pool`), which
forks a child per call, and the warm process (:mod:`fray.warm_process`), which runs calls itself,
one after another.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["preparation_data", "remove_folders", "start_worker"]


def start_worker(entry: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[Connection, subprocess.Popen]:
    """Start ``entry`` (``module:function``), called as ``function(fd, caller_pid, args)`` in a fresh
    interpreter with environment ``env``; returns the caller's end of their socket and the process.

    The process leads a session of its own: a Ctrl-C meant for the caller must not reach it (the
    caller ends what it runs), and killing its group ends everything it started.
    """
    module, function = entry.split(":")
    ours, theirs = socket.socketpair()
    conn = Connection(ours.detach())
    child_fd = theirs.detach()
    code = f"import sys; from {module} import {function}; {function}(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])"
    try:
        process = subprocess.Popen([sys.executable, "-c", code, str(child_fd), str(os.getpid()), *args],
                                   pass_fds=(child_fd,), stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=dict(env))
    finally:
        os.close(child_fd)
    return conn, process


def preparation_data(name: str) -> dict[str, Any]:
    """What a worker needs to become like the caller, as multiprocessing's ``spawn`` sends it
    (``sys.path``, the working folder, ``__main__``), without the authentication key (never to be pickled)."""
    import multiprocessing.spawn  # the standard library's own recipe: only when a worker starts

    data = multiprocessing.spawn.get_preparation_data(name)
    data.pop("authkey", None)
    return data


def remove_folders(*folders: str | None) -> None:
    """Remove each of ``folders`` (None and missing ones skipped): a pool's or warm process's scratch."""
    for folder in folders:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
