"""Inside a warm template process (see :mod:`fray.pool`): its loop, and each call forked from it.

What the template imports, and what it learns from the calls, is :mod:`fray.template_imports`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import cloudpickle

from fray.process_group import WATCH_INTERVAL_S, start_group_reaper, watch_parent
from fray.process_job import Outcome
from fray.template_imports import (
    Learner,
    ModuleEntry,
    fork_hazard,
    import_into_template,
    imported_since,
    under,
)

__all__ = ["BOOTSTRAPPING", "TemplateSettings", "read_result", "template_main"]

BOOTSTRAPPING = False  # True while a template imports its caller's __main__ (see fray.pool._Template)


@dataclass(frozen=True)
class TemplateSettings:
    """What the caller tells a template when it starts (see :class:`fray.pool.PoolConfig`)."""

    never_in_template: tuple[str, ...]
    """Packages never imported into the template."""
    learn_imports: bool
    """Calls report the modules they imported, for the template to import too."""
    main_in_calls: bool = False
    """Each call imports the caller's ``__main__`` itself: importing it made a template unsafe to fork."""


def _import_main(main: dict[str, str]) -> None:
    """Import the caller's main script or module as ``__mp_main__``, as multiprocessing's spawn does."""
    import multiprocessing.spawn

    global BOOTSTRAPPING
    BOOTSTRAPPING = True
    try:
        multiprocessing.spawn.prepare(main)
    finally:
        BOOTSTRAPPING = False


def _run_call(template_pid: int, inherited: Sequence[Any], payload: bytes, env: dict[str, str], log_path: str,
              result_path: str, settings: TemplateSettings, main: dict[str, str]) -> NoReturn:
    """The body of a forked call: never returns.

    Its result file holds ``(outcome, modules the call imported)`` (those only when
    ``settings.learn_imports``). ``main``: the caller's ``__main__``, when the call imports it.
    """
    code = 1
    try:
        before = set(sys.modules) if settings.learn_imports else set()
        for thing in inherited:  # the template's own channels are not this call's business
            thing.close()
        os.setsid()
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        start_group_reaper()  # before any thread of this call starts
        # The template dies only when the caller did (or it was killed): then so does this call's group.
        watch_parent(template_pid)
        os.environ.update(env)
        learned: list[ModuleEntry] = []
        try:
            if main:
                _import_main(main)
            fn, args, kwargs = cloudpickle.loads(payload)
            message = ("ok", cloudpickle.dumps(fn(*args, **kwargs)), None)
            if settings.learn_imports:
                learned = imported_since(before, settings.never_in_template)
        except BaseException as e:  # noqa: BLE001 - everything is reported to the caller
            import traceback

            tb = traceback.format_exc()
            sys.stderr.write(tb)
            message = ("error", f"{type(e).__name__}: {e}", tb)
        _write_result(result_path, message, learned)
        code = 0
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _write_result(path: str, outcome: Outcome, learned: list[ModuleEntry]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(cloudpickle.dumps((outcome, learned)))
    os.replace(tmp, path)  # whole or absent: a call killed mid-write "died"


def read_result(path: str, code: int) -> tuple[Outcome, list[ModuleEntry]]:
    """In the caller: a call's outcome and the modules it imported (if it reported them), from its
    result file (removed); ``code`` is its exit code, for the outcome of a call that wrote none."""
    try:
        with open(path, "rb") as f:
            outcome, learned = cloudpickle.loads(f.read())
        os.unlink(path)
    except FileNotFoundError:
        return ("died", f"process died with exit code {code}", code), []
    return outcome, learned


def template_main(fd: int, caller_pid: int, preload: Sequence[str]) -> None:
    """The template's loop: fork a child per call, report each start and exit to the caller."""
    conn = Connection(fd)
    # As multiprocessing's spawn does: the caller's sys.path, folder and ``__main__`` module (as
    # ``__mp_main__``), so what the caller pickled from its main script unpickles here.
    import multiprocessing.spawn

    preparation, settings = conn.recv()
    assert isinstance(settings, TemplateSettings)
    never = settings.never_in_template
    main = {k: preparation.pop(k) for k in ("init_main_from_name", "init_main_from_path") if k in preparation}
    multiprocessing.spawn.prepare(preparation)
    if main and not settings.main_in_calls:
        _import_main(main)
        main = {}
        hazard = fork_hazard(never)
        if hazard is not None:
            # A main script that imports numpy (OpenBLAS starts threads), say: each call imports it.
            conn.send(("unsafe-main", None, hazard))
            return
    import_into_template(preload, never)
    hazard = fork_hazard(never)
    if hazard is not None:
        raise SystemExit(f"fray pool: preloading {list(preload)} left the template unsafe to fork ({hazard})")
    learner = Learner(never)
    selector = selectors.DefaultSelector()
    selector.register(conn, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, int]] = {}  # read end of the exit pipe -> (call id, pid)
    unsafe: str | None = None  # the module that made this template unsafe to fork: it forks no more
    retiring = False

    def start_probe() -> None:
        if unsafe is None and not retiring and (read_end := learner.start()) is not None:
            selector.register(read_end, selectors.EVENT_READ, "probe")

    while True:
        if os.getppid() != caller_pid:
            for _call, pid in children.values():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            if learner.probe is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(learner.probe.pid, signal.SIGKILL)
            os._exit(0)
        if retiring and not children and learner.probe is None:
            os._exit(0)
        if learner.probe is not None:
            learner.probe.end_if(overdue_only=not retiring)
        for key, _ in selector.select(WATCH_INTERVAL_S):
            if key.data is None:
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    retiring = True
                    selector.unregister(conn)
                    continue
                if request[0] == "retire":
                    retiring = True
                    continue
                if request[0] == "learn":
                    learner.add(*request[1:])
                    start_probe()
                    if learner.probe is None:
                        conn.send(("learned", None, [], [], unsafe is not None, False))
                    continue
                _, call_id, modules, payload, env, log_path, result_path = request
                failed, unsafe_now = import_into_template([m for m in modules if not under(m, learner.excluded)],
                                                          never)
                unsafe = unsafe or unsafe_now
                if unsafe is not None:
                    # This template may not fork any more (fork_hazard): hand the call back, retire.
                    conn.send(("refused", call_id, unsafe))
                    retiring = True
                    continue
                read_end, write_end = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(read_end)
                    _run_call(os.getppid(), (conn, selector), payload, env, log_path, result_path, settings, main)
                os.close(write_end)
                children[read_end] = (call_id, pid)
                selector.register(read_end, selectors.EVENT_READ, "exit")
                conn.send(("started", call_id, pid, failed))
            elif key.data == "probe":
                assert learner.probe is not None
                if not learner.probe.read():
                    continue
                selector.unregister(key.fd)
                if retiring:
                    learner.discard()
                    continue
                imported, excluded, unsafe_now = learner.finish()
                unsafe = unsafe or unsafe_now
                retiring = retiring or unsafe is not None
                start_probe()
                conn.send(("learned", None, imported, excluded, unsafe is not None, learner.probe is not None))
            else:
                read_end = key.fd
                call_id, pid = children.pop(read_end)
                selector.unregister(read_end)
                os.close(read_end)
                _, status = os.waitpid(pid, 0)
                # Anything the call started and left behind in its group ends with it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                conn.send(("exited", call_id, os.waitstatus_to_exitcode(status)))
