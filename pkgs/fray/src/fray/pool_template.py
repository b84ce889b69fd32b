"""Inside a warm template process (see :mod:`fray.pool`): its loop, and each call forked from it.

What the template imports, and what it learns from the calls, is :mod:`fray.template_imports`; the
messages it exchanges with the pool are :mod:`fray.pool_messages`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import cloudpickle

from fray.pool_messages import (
    Exited,
    Learn,
    Learned,
    Prepare,
    Refused,
    Retire,
    Run,
    Started,
    TemplateSettings,
    ToTemplate,
    UnsafeMain,
)
from fray.process_exit import exit_process
from fray.process_group import WATCH_INTERVAL_S, start_group_reaper, watch_parent
from fray.process_job import Outcome
from fray.template_blas import give_call_its_blas_threads
from fray.template_imports import (
    Learner,
    ModuleEntry,
    fork_hazard,
    import_into_template,
    imported_since,
    under,
)

__all__ = ["BOOTSTRAPPING", "TemplateSettings", "read_result", "template_main", "write_result"]

BOOTSTRAPPING = False  # True while a template imports its caller's __main__ (see fray.pool._Template)


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
        output_to(log_path)
        start_group_reaper()  # before any thread of this call starts
        # The template dies only when the caller did (or it was killed): then so does this call's group.
        watch_parent(template_pid)
        give_call_its_blas_threads(env)
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
        write_result(result_path, message, learned)
        code = 0
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        exit_process(code)


def output_to(log_path: str) -> None:
    """Send this process's standard output and error (its file descriptors 1 and 2, and Python's
    streams over them, line-buffered) to the end of ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def write_result(path: str, outcome: Outcome, learned: list[ModuleEntry]) -> None:
    """Write a call's outcome (and the modules it imported) for :func:`read_result`, whole or not at all."""
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
    # Every call sets its BLAS threads with it (fray.template_blas): imported once, here, not by each call.
    import threadpoolctl  # noqa: F401

    prepared = _prepare(conn, preload)
    if prepared is not None:
        _TemplateLoop(conn, caller_pid, *prepared).serve()


def _prepare(conn: Connection, preload: Sequence[str]) -> tuple[TemplateSettings, dict[str, str]] | None:
    """Become like the caller and import ``preload``: the settings, and the caller's ``__main__`` when
    each call imports it itself; None when importing that main made this template unsafe to fork
    (the caller was told: :class:`UnsafeMain`)."""
    # As multiprocessing's spawn does: the caller's sys.path, folder and ``__main__`` module (as
    # ``__mp_main__``), so what the caller pickled from its main script unpickles here.
    import multiprocessing.spawn

    prepare = conn.recv()
    assert isinstance(prepare, Prepare) and isinstance(prepare.settings, TemplateSettings)
    settings, preparation = prepare.settings, dict(prepare.preparation)
    never = settings.never_in_template
    main = {k: preparation.pop(k) for k in ("init_main_from_name", "init_main_from_path") if k in preparation}
    multiprocessing.spawn.prepare(preparation)
    if main and not settings.main_in_calls:
        _import_main(main)
        main = {}
        hazard = fork_hazard(never)
        if hazard is not None:
            # A main script that starts a thread, say: each call imports it.
            conn.send(UnsafeMain(hazard))
            return None
    import_into_template(preload, never)
    hazard = fork_hazard(never)
    if hazard is not None:
        raise SystemExit(f"fray pool: preloading {list(preload)} left the template unsafe to fork ({hazard})")
    return settings, main


class _TemplateLoop:
    """The template after :func:`_prepare`: waits on the caller's requests, its children's exits and
    its import probe, until it retires (or the caller dies)."""

    def __init__(self, conn: Connection, caller_pid: int, settings: TemplateSettings, main: dict[str, str]):
        self.conn = conn
        self.caller_pid = caller_pid
        self.settings = settings
        self.main = main
        self.never = settings.never_in_template
        self.learner = Learner(self.never)
        self.selector = selectors.DefaultSelector()
        self.selector.register(conn, selectors.EVENT_READ, None)
        self.children: dict[int, tuple[int, int]] = {}  # read end of the exit pipe -> (call id, pid)
        self.unsafe: str | None = None  # the module that made this template unsafe to fork: it forks no more
        self.retiring = False

    def serve(self) -> NoReturn:
        while True:
            if os.getppid() != self.caller_pid:
                self._kill_all()
                exit_process(0)
            if self.retiring and not self.children and self.learner.probe is None:
                exit_process(0)
            if self.learner.probe is not None:
                self.learner.probe.end_if(overdue_only=not self.retiring)
            for key, _ in self.selector.select(WATCH_INTERVAL_S):
                if key.data is None:
                    self._on_request()
                elif key.data == "probe":
                    self._on_probe(key.fd)
                else:
                    self._on_exit(key.fd)

    def _kill_all(self) -> None:
        """The caller died: so do the calls and the probe."""
        for _call, pid in self.children.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if self.learner.probe is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.learner.probe.pid, signal.SIGKILL)

    def _start_probe(self) -> None:
        if self.unsafe is None and not self.retiring and (read_end := self.learner.start()) is not None:
            self.selector.register(read_end, selectors.EVENT_READ, "probe")

    def _on_request(self) -> None:
        try:
            request: ToTemplate = self.conn.recv()
        except (EOFError, OSError):
            self.retiring = True
            self.selector.unregister(self.conn)
            return
        if isinstance(request, Retire):
            self.retiring = True
        elif isinstance(request, Learn):
            self.learner.add(request.entries, request.refused)
            self._start_probe()
            if self.learner.probe is None:
                self.conn.send(Learned([], [], unsafe=self.unsafe is not None, more=False))
        else:
            self._start_call(request)

    def _start_call(self, run: Run) -> None:
        """Fork ``run``'s child, once the modules it asks for are imported here (if that is safe)."""
        failed, unsafe_now = import_into_template([m for m in run.modules if not under(m, self.learner.excluded)],
                                                  self.never)
        self.unsafe = self.unsafe or unsafe_now
        if self.unsafe is not None:
            # This template may not fork any more (fork_hazard): hand the call back, retire.
            self.conn.send(Refused(run.call_id, self.unsafe))
            self.retiring = True
            return
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _run_call(os.getppid(), (self.conn, self.selector), run.payload, run.env, run.log_path, run.result_path,
                      self.settings, self.main)
        os.close(write_end)
        self.children[read_end] = (run.call_id, pid)
        self.selector.register(read_end, selectors.EVENT_READ, "exit")
        self.conn.send(Started(run.call_id, pid, failed))

    def _on_probe(self, fd: Any) -> None:
        """The probe wrote or ended: when it ended, import what it imported safely, and say so."""
        learner = self.learner
        assert learner.probe is not None
        if not learner.probe.read():
            return
        self.selector.unregister(fd)
        if self.retiring:
            learner.discard()
            return
        imported, excluded, unsafe_now = learner.finish()
        self.unsafe = self.unsafe or unsafe_now
        self.retiring = self.retiring or self.unsafe is not None
        self._start_probe()
        self.conn.send(Learned(imported, excluded, unsafe=self.unsafe is not None, more=learner.probe is not None))

    def _on_exit(self, read_end: Any) -> None:
        """A call's child closed its exit pipe: reap it (and its group), and tell the caller."""
        call_id, pid = self.children.pop(read_end)
        self.selector.unregister(read_end)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        # Anything the call started and left behind in its group ends with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self.conn.send(Exited(call_id, os.waitstatus_to_exitcode(status)))
