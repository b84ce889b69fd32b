"""``marin run`` as its console script runs it, in the test's own process, for the no-op record's
tests: answered from its record when that holds, else in full while recording (and writing the
record when the run was a no-op); and the full path's answer (the experiment imported again and
planned, as ``MARIN_NO_FAST_NOOP=1 marin plan`` does).

In a process of its own, ``marin run`` costs an interpreter start and the engine's imports (about a
second); here a recorded no-op costs tens of milliseconds, so a test can afford hundreds. What a
fresh process would not have (the experiment's modules in ``sys.modules``, ``linecache``'s and the
import system's caches) is dropped before each import.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import linecache
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Ran", "forget_modules", "full_to_run", "marin_run"]

_CONSOLE_CALL = compile("cli.main(args=argv, prog_name='marin')", os.path.join(os.path.dirname(sys.executable), "marin"),
                        "exec")


@dataclass(frozen=True)
class Ran:
    """What one in-process ``marin run`` did."""

    answered: bool
    """It was answered from its no-op record (nothing imported, nothing planned)."""
    stdout: str
    stderr: str
    code: int
    """Its exit code."""
    record: str = ""
    """Where its no-op record is (or would be)."""
    no_record: str | None = None
    """Why it wrote no no-op record (what ``marin -v run`` says), when it ran in full and said why."""


def forget_modules(folders: Sequence[str]) -> None:
    """Drop the modules whose files are under ``folders`` (an experiment and its helpers) and the
    caches a fresh process would not have, so the next import reads them again."""
    roots = tuple(os.path.abspath(f).rstrip(os.sep) + os.sep for f in folders)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.abspath(file).startswith(roots):
            del sys.modules[name]
    # The import system's listings of these folders only: a fresh process lists every folder, but
    # another folder listed again here would be a question this command asks and a fresh one too.
    for entry, finder in list(sys.path_importer_cache.items()):
        invalidate = getattr(finder, "invalidate_caches", None)  # not every path entry finder has it
        if invalidate is not None and (os.path.abspath(entry) + os.sep).startswith(roots):
            invalidate()
    importlib.metadata.FastPath.__new__.cache_clear()  # type: ignore[attr-defined]  # its listings of sys.path folders
    linecache.clearcache()


class _Stream(io.TextIOWrapper):
    """A stream as the console script's are (UTF-8 text over bytes: click writes to it as to a
    terminal's or a pipe's), kept in memory."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", write_through=True)

    def getvalue(self) -> str:
        return self.buffer.getvalue().decode()  # type: ignore[attr-defined]


@contextlib.contextmanager
def _streams() -> Iterator[tuple[_Stream, _Stream]]:
    out, err = _Stream(), _Stream()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved


def marin_run(args: Sequence[str], *, forget: Sequence[str] = ()) -> Ran:
    """``marin run ARGS`` (``args`` without the verb) in this process, as the console script runs it.

    Args:
        args: targets and options.
        forget: folders whose modules are dropped first (:func:`forget_modules`).
    """
    # Here: marin's CLI modules are what this helper drives; testsupport loads none of them at import.
    from marin.cli import noop
    from marin.cli.group import cli
    from marin.cli.noop_recording import start

    forget_modules(forget)
    argv = ["run", *args]
    request = noop.request_of(argv)
    if request is None:
        raise ValueError(f"no no-op record may answer marin {' '.join(argv)} (MARIN_NO_FAST_NOOP set?)")
    level = logging.getLogger().level
    saved_argv = sys.argv
    sys.argv = ["marin", *argv]  # what an experiment that reads its command line sees under the console script
    said = _Said()
    logger = logging.getLogger("marin.cli.noop_depends")  # its own level only: a debug root refuses a record
    logger_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(said)
    with _streams() as (out, err):
        if noop.answer(request):
            return Ran(True, out.getvalue(), err.getvalue(), 0, request.path)
        recording = start(request)
        code = 0
        try:
            # Called from code that stands where the console script's does (a module of the
            # environment's): the recorder takes the frames above it for the command's own, not
            # for an experiment's code calling Marin (this helper's file is no package's).
            exec(_CONSOLE_CALL, {"cli": cli, "argv": argv})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            recording.finish(ok=code == 0)
            logging.getLogger().setLevel(level)
            logger.removeHandler(said)
            logger.setLevel(logger_level)
            sys.argv = saved_argv
    return Ran(False, out.getvalue(), err.getvalue(), code, request.path, said.why)


class _Said(logging.Handler):
    """Keeps the reason ``marin.cli.noop_depends`` gives for writing no record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.why: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("no no-op record for this run: "):
            self.why = message.removeprefix("no no-op record for this run: ")


def full_to_run(targets: Sequence[str], prefix: str, *, forget: Sequence[str] = ()) -> list[str]:
    """The full path's answer to ``marin run TARGETS --prefix PREFIX``: the steps that would run
    (names, sorted), the experiment imported again and planned."""
    from marin.cli.targets import load_targets  # here, as above
    from marin.execution.run.runner import StepRunner

    forget_modules(forget)
    saved_argv = sys.argv
    sys.argv = ["marin", "run", *targets, "--prefix", prefix]
    try:
        steps = load_targets(list(targets))
    finally:
        sys.argv = saved_argv
    runner = StepRunner(prefix=prefix, strict_env=False)
    try:
        return sorted(p.name for p in runner.plan(steps).to_run())
    finally:
        runner.close()
