"""What a ``marin run`` reads and prints, recorded while it runs, for its no-op record
(:mod:`marin.cli.noop`).

Started by :mod:`marin.cli.main` before click and the engine are imported (so it uses the
standard library only), when the command line is one a record may answer:

* an audit hook (``sys.addaudithook``) notes every file opened for reading and every folder
  listed, with its ``stat`` at that moment (a file looked for and not found is noted as absent).
  A hook cannot be removed: once the recording ends it costs one check of a module global. The
  same hook makes the command unrecordable when the experiment's own code (:func:`marin.cli.noop_calls.users_call`)
  runs a subprocess, opens a socket, an SQLite database or a native library through ``ctypes``,
  reads a file's extended attributes or the terminal, or reads a kernel file (``/proc/cpuinfo``);
* the ``stat`` family is wrapped (:mod:`marin.cli.noop_watch`): each question and its answer is noted;
* while the experiment is imported and its plan made, every handle lowered (:func:`watch_calls` to
  :func:`unwatch_calls`, from ``marin run``: a dependency's ``ArtifactStep.build_config`` runs while
  planning), what its own code calls is watched (:mod:`marin.cli.noop_calls`): the clock, random
  sources and installed packages' native code make it unrecordable. After the plan, a no-op runs
  none of the experiment's code but a step's expander (:mod:`marin.cli.noop_depends` refuses a
  record when one is the experiment's own);
* standard input read, by anyone (``sys.stdin`` is guarded; a descriptor of it opened or read is
  seen by the audit hook and :mod:`marin.cli.noop_watch`), makes the command unrecordable;
* stdout and stderr are passed through a tee that keeps what was printed, in order.

Why a command is unrecordable is kept (:func:`refusal`) and printed by ``marin run -v``.

The run says, once it knows, whether it was a no-op (:func:`abandon` when it builds something;
:meth:`Recording.offer` with what else its answer depends on when it was one, from
:mod:`marin.cli.noop_depends`), and :meth:`Recording.finish` writes the record when the command
ended well. A process forked meanwhile (a warm worker) records nothing.
"""

from __future__ import annotations

import os
import sys
import time

from marin.cli import noop, noop_watch

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TextIO

__all__ = ["Recording", "abandon", "current", "refusal", "start", "unwatch_calls", "watch_calls"]

_MAX_OUTPUT = 1 << 20
"""Characters of output a record keeps at most; a command that prints more leaves no record."""

_UNSEEN_EVENTS = (
    (("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty."),
     "runs a process"),
    (("socket.", "urllib.", "http.client.", "ftplib.", "smtplib.", "imaplib.", "poplib.", "nntplib.", "telnetlib.",
      "webbrowser."), "uses the network"),
    (("sqlite3.",), "opens an SQLite database"),
    (("ctypes.",), "calls native code through ctypes"),
    (("os.getxattr", "os.listxattr"), "reads extended attributes"),
    (("builtins.input",), "reads the terminal"),
    (("mmap.", "_winapi.", "winreg.", "msvcrt."), "reads what the operating system holds"),
)
"""Audit events of what a ``stat`` cannot check next time (prefixes, and what they do): raised by
the experiment's own code, they make the command unrecordable."""
_UNSEEN_PREFIXES = tuple(prefix for prefixes, _what in _UNSEEN_EVENTS for prefix in prefixes)

_current: Recording | None = None
_refusal: str | None = None
_hooked = False


class Recording:
    """What one command read and printed so far."""

    def __init__(self, request: noop.Request):
        self.request = request
        self.active = True
        """False once abandoned: nothing more is noted and no record is written."""
        self.started_ns = time.time_ns()
        """When recording began: a file modified less than the stat cache's racy window before it
        cannot be trusted to ``stat`` differently once changed (:mod:`marin.cli.noop_depends`)."""
        self.seen: dict[str, os.stat_result | int | None] = {}
        """Each path read, listed or ``stat``ed, with its ``stat`` when first seen (None: it did not
        exist; a negative number: the error asking it gave)."""
        self.checks: dict[tuple[str, str, object], object] = {}
        """Every other question asked of a path (:data:`marin.cli.noop.QUESTIONS`, by kind, path and
        argument), with the first answer it got."""
        self.read: set[str] = set()
        """The paths of files opened for reading (a small one's content is digested into the record)."""
        self.refused: str | None = None
        """Why the command cannot be answered from a record (it ran a subprocess ...), once known."""
        self.output: list[tuple[int, str]] = []
        self._printed = 0
        self._offered: dict[str, Any] | None = None
        self._ignored = (noop.records_folder(os.environ) + os.sep,)  # the recorder's own files

    def abandon(self) -> None:
        """Record nothing more and write no record (the run builds something, or cannot be answered)."""
        self.active = False
        self.seen.clear()
        self.checks.clear()
        self.read.clear()
        self.output.clear()
        self._offered = None
        self.stop_watching()

    def refuse(self, reason: str) -> None:
        """The command cannot be answered from a record, for ``reason``: abandon it, keeping why."""
        global _refusal
        if self.active:
            self.refused = _refusal = reason
            self.abandon()

    def stop_watching(self) -> None:
        """Put back what the recording wrapped, and stop watching calls (what the run asked is known)."""
        from marin.cli import noop_calls, noop_watch  # loaded by start()

        noop_watch.uninstall()
        noop_calls.unwatch()

    def asked(self, kind: str, path: str, arg: object, answer: object) -> None:
        """A question (:data:`marin.cli.noop.QUESTIONS`) was asked of ``path`` and got ``answer``
        (a ``stat`` question: the ``stat_result`` itself)."""
        if not self.active or path.startswith(self._ignored) or path.endswith(".pyc"):
            return
        if kind == noop.STAT:
            self.seen.setdefault(path, answer)  # type: ignore[arg-type]
        else:
            self.checks.setdefault((kind, path, arg if not isinstance(arg, list) else tuple(arg)), answer)

    def _note(self, path: Any, reads: bool = False) -> None:
        if isinstance(path, int):  # a descriptor, opened by path before (noted then), or standard input
            if _is_stdin(path):
                self.refuse(f"{_where_reading()} reads standard input (descriptor {path}), which no stat can check")
            return
        path = noop_watch.absolute(path)
        if path is None:
            return
        if path.startswith(noop_watch.PSEUDO):
            from marin.cli.noop_calls import users_call

            where = users_call(sys._getframe(3))  # _audit, the event's handler, then the code that opened it
            if where is not None:
                self.refuse(f"{where} reads {path}, which stat cannot check")
            return
        if path.startswith(self._ignored) or path.endswith(".pyc"):
            return  # a .pyc is its .py's (every imported module's source is in the record)
        if reads:
            self.read.add(path)
        if path in self.seen:
            return
        try:
            self.seen[path] = noop_watch.real_stat(path)
        except OSError as e:
            self.seen[path] = noop.error_answer(e)

    def opened(self, path: Any, mode: Any, flags: Any) -> None:
        """An ``open`` audit event: noted unless the file is opened only to be written (created,
        truncated, appended to)."""
        if isinstance(mode, str):
            reads = "r" in mode or ("a" in mode and "+" in mode)
        else:
            flags = flags if isinstance(flags, int) else 0
            reads = not flags & (os.O_WRONLY | os.O_TRUNC | os.O_EXCL)
        if reads:
            self._note(path, reads=True)

    def listed(self, path: Any) -> None:
        """An ``os.listdir`` or ``os.scandir`` audit event."""
        self._note("." if path is None else path)

    def printed(self, stream: int, text: str) -> None:
        if not text:
            return
        self._printed += len(text)
        if self._printed > _MAX_OUTPUT:
            self.abandon()
            return
        if self.output and self.output[-1][0] == stream:
            self.output[-1] = (stream, self.output[-1][1] + text)
        else:
            self.output.append((stream, text))

    def offer(self, paths: Mapping[str, os.stat_result | int | None], checks: Mapping[tuple[str, str, object], object],
              index: str, markers: list[str], digests: Mapping[str, str] | None = None) -> None:
        """The run was a no-op: what its answer depends on (every path to ``stat``, every other question
        with its answer, the done index folder and the markers it must hold, the small files read with
        their content's digest); written by :meth:`finish`."""
        if self.active:
            self._offered = {"paths": paths, "checks": checks, "index": index, "markers": markers,
                             "digests": dict(digests or {})}

    def finish(self, ok: bool) -> None:
        """The command ended (``ok``: with exit code 0): write the record it offered, or remove a
        record that no longer holds."""
        global _current
        _current = None
        _StdinGuard.remove()
        request, offered = self.request, self._offered if self.active and ok else None
        self.active = False
        self.stop_watching()
        try:
            if offered is None:
                noop.remove_record(request)
                return
            paths = {path: _kept(st) for path, st in offered["paths"].items()}
            checks = [(kind, path, list(arg) if isinstance(arg, tuple) else arg, _kept(answer))
                      for (kind, path, arg), answer in offered["checks"].items()]
            noop.write_record(request, noop.record_of(request.key, paths, checks, offered["index"],
                                                      offered["markers"], self.output, offered["digests"]))
        except OSError as e:  # a read-only home: the next no-op runs in full, nothing else is lost
            import logging  # loaded already by the command that ran

            logging.getLogger(__name__).debug("no-op record %s not written: %s", request.path, e)


def _kept(answer: object) -> Any:
    """An answer as a record keeps it (a ``stat_result`` as :func:`marin.cli.noop.stat_key`)."""
    return noop.stat_key(answer) if isinstance(answer, os.stat_result) else answer


class _Tee:
    """A text stream that passes everything to ``stream`` and tells the recording what it printed."""

    def __init__(self, stream: TextIO, which: int):
        self._stream = stream
        self._which = which

    def write(self, text: Any) -> int:
        recording = _current
        if recording is not None and recording.active and isinstance(text, str):
            recording.printed(self._which, text)
        return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            abandon()  # bytes written past the tee would not be in the record
        return getattr(self._stream, name)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    recording = _current
    if recording is None or not recording.active or noop_watch.busy():
        return
    try:
        if event == "open":
            recording.opened(*args[:3])
        elif event in ("os.listdir", "os.scandir"):
            recording.listed(args[0])
        elif event.startswith(_UNSEEN_PREFIXES):
            from marin.cli.noop_calls import users_call

            where = users_call(sys._getframe(1), through_marin=True)
            if where is not None:
                what = next(what for prefixes, what in _UNSEEN_EVENTS if event.startswith(prefixes))
                recording.refuse(f"{where} {what} (audit event {event}): what it gets no stat can check")
    except Exception as e:  # noqa: BLE001 - an audit hook must never fail the operation it watches
        recording.refuse(f"the recorder failed on the audit event {event} ({type(e).__name__}: {e})")


_stdin_identity: tuple[int, int] | None = None
"""(device, inode) of standard input when the recording began; None when it was closed."""


def _is_stdin(fd: int) -> bool:
    """Whether the descriptor ``fd`` is standard input (descriptor 0, or another for the same file)."""
    if _stdin_identity is None:
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == _stdin_identity


def _where_reading() -> str:
    """Where the code that reads is ("file:line" of the experiment's, else "the command")."""
    from marin.cli.noop_calls import users_call

    return users_call(sys._getframe(2), through_marin=True) or "the command"


class _StdinGuard:
    """``sys.stdin`` while a command records: reading it makes the command unrecordable (what it
    holds is no file a ``stat`` can check); asking whether it is a terminal, or for its encoding, does not."""

    _READS = frozenset({"read", "readline", "readlines", "buffer", "readinto", "detach", "__next__"})

    def __init__(self, stream: Any):
        self._stream = stream

    def _refuse(self, how: str) -> None:
        recording = current()
        if recording is not None:
            recording.refuse(f"{_where_reading()} reads standard input (sys.stdin.{how}), which no stat can check")

    def __getattr__(self, name: str) -> Any:
        if name in self._READS:
            self._refuse(name)
        return getattr(self._stream, name)

    def __iter__(self) -> Any:
        self._refuse("__iter__")
        return iter(self._stream)

    def __next__(self) -> Any:
        self._refuse("__next__")
        return next(self._stream)

    @staticmethod
    def install() -> None:
        if sys.stdin is not None and not isinstance(sys.stdin, _StdinGuard):
            guard = _StdinGuard(sys.stdin)
            if sys.__stdin__ is sys.stdin:
                sys.__stdin__ = guard  # type: ignore[misc]  # code that "restores" stdin gets the guard too
            sys.stdin = guard  # type: ignore[assignment]

    @staticmethod
    def remove() -> None:
        if isinstance(sys.stdin, _StdinGuard):
            stream = sys.stdin._stream
            if sys.__stdin__ is sys.stdin:
                sys.__stdin__ = stream  # type: ignore[misc]
            sys.stdin = stream


def refusal() -> str | None:
    """Why this command's recording was refused (:meth:`Recording.refuse`), if it was."""
    return _refusal


def watch_calls() -> None:
    """The experiment is about to be imported: watch what its own code calls (:mod:`marin.cli.noop_calls`)."""
    recording = current()
    if recording is not None:
        from marin.cli import noop_calls

        if not noop_calls.watch(recording):
            recording.refuse("another profiler (sys.setprofile) is installed: what the experiment calls cannot be watched")


def unwatch_calls() -> None:
    """The experiment is imported: stop watching calls (planning runs Marin's code)."""
    from marin.cli import noop_calls

    noop_calls.unwatch()


def current() -> Recording | None:
    """The recording of this command, while it records."""
    return _current if _current is not None and _current.active else None


def abandon() -> None:
    """This command will not be a no-op (or cannot be answered): stop recording, write no record."""
    if _current is not None:
        _current.abandon()


def start(request: noop.Request) -> Recording:
    """Begin recording what this command reads and prints, for ``request``'s record."""
    global _current, _hooked, _refusal, _stdin_identity
    _current = Recording(request)
    _refusal = None
    try:
        st = os.fstat(0)
        _stdin_identity = (st.st_dev, st.st_ino)
    except OSError:  # no standard input at all
        _stdin_identity = None
    _StdinGuard.install()
    noop_watch.install(_current, _is_stdin)
    if not _hooked:
        sys.addaudithook(_audit)
        os.register_at_fork(after_in_child=abandon)
        _hooked = True
    sys.stdout = _Tee(sys.stdout, 1)  # type: ignore[assignment]
    sys.stderr = _Tee(sys.stderr, 2)  # type: ignore[assignment]
    return _current
