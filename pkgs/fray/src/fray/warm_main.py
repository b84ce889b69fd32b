"""Inside a warm process (see :mod:`fray.warm_process`): its loop, running calls one after another.

Each call runs as it would in a process of its own: its environment variables set for it, its
output (file descriptors 1 and 2, so C code's and subprocesses' too) in its own log, its outcome
in its result file (:func:`fray.pool_template.write_result`, read by the caller as a pool call's).
After each, the process puts back what the call changed (:class:`fray.call_hygiene.ProcessState`)
and tells the caller whether it is clean; a call that failed, or left what cannot be put back,
ends the process (the caller starts another for the next call).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from fray.call_hygiene import ProcessState
from fray.pool_messages import Exited, Prepare, Retire, Run, Settled, Started, WarmSettings
from fray.pool_template import output_to, write_result
from fray.process_exit import exit_process
from fray.process_group import start_group_reaper, watch_parent
from fray.process_job import Outcome

__all__ = ["warm_main"]


def warm_main(fd: int, caller_pid: int, args: list[str]) -> None:
    """The process's loop: run each call sent, until told to retire, idle too long, or unclean.

    ``args``: the file its own output goes to between calls (what it prints while it starts, say).
    """
    output_to(args[0])
    start_group_reaper()  # before any thread: what calls start ends with this process, however it ends
    watch_parent(caller_pid)  # the caller gone (even by SIGKILL): so is this process and its group
    conn = Connection(fd)
    prepare = conn.recv()
    assert isinstance(prepare, Prepare) and isinstance(prepare.settings, WarmSettings)
    settings = prepare.settings
    _become_like_caller(prepare.preparation)
    for module in settings.preload:
        importlib.import_module(module)
    while conn.poll(settings.idle_s):
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if isinstance(request, Retire):
            break
        assert isinstance(request, Run)
        if _serve(conn, request) is not None:
            break
    exit_process(0)


def _become_like_caller(preparation: dict[str, Any]) -> None:
    """The caller's ``sys.path`` and folder, as multiprocessing's spawn gives them; not its
    ``__main__`` (a call names what it runs by module, or carries it by value)."""
    import multiprocessing.spawn

    multiprocessing.spawn.prepare({k: v for k, v in preparation.items()
                                   if k not in ("init_main_from_name", "init_main_from_path")})


def _serve(conn: Connection, run: Run) -> str | None:
    """Run one call, then put the process back; returns why it is unclean (it must exit), or None."""
    before = ProcessState.take()
    streams = sys.stdout, sys.stderr
    fds = os.dup(1), os.dup(2)
    failed: str | None = None
    try:
        os.environ.update(run.env)
        output_to(run.log_path)
        conn.send(Started(run.call_id, os.getpid(), []))
        outcome = _call(run.payload)
        if outcome[0] != "ok":
            failed = f"it failed ({str(outcome[1]).splitlines()[0] if outcome[1] else 'no message'})"
        write_result(run.result_path, outcome, [])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        sys.stdout, sys.stderr = streams
    conn.send(Exited(run.call_id, 0))
    unclean = before.restore()
    # A failed call may have left the process in a state nothing here can see (a runtime error
    # half-way through the device, a library's module left half-set): it is not trusted again.
    unclean = "; ".join(x for x in (failed, unclean) if x) or None
    conn.send(Settled(run.call_id, unclean))
    return unclean


def _call(payload: bytes) -> Outcome:
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        return ("ok", cloudpickle.dumps(fn(*args, **kwargs)), None)
    except BaseException as e:  # noqa: BLE001 - everything is reported to the caller
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        return ("error", f"{type(e).__name__}: {e}", tb)
