"""What a ``marin run`` reads and prints, recorded while it runs, for its no-op record
(:mod:`marin.cli.noop`).

Started by :mod:`marin.cli.main` before click and the engine are imported (so it uses the
standard library only), when the command line is one a record may answer:

* an audit hook (``sys.addaudithook``) notes every file opened for reading and every folder
  listed, with its ``stat`` at that moment (a file looked for and not found is noted as absent).
  A hook cannot be removed: once the recording ends it costs one check of a module global;
* stdout and stderr are passed through a tee that keeps what was printed, in order.

The run says, once it knows, whether it was a no-op (:func:`abandon` when it builds something;
:meth:`Recording.offer` with what else its answer depends on when it was one, from
:mod:`marin.cli.noop_depends`), and :meth:`Recording.finish` writes the record when the command
ended well. A process forked meanwhile (a warm worker) records nothing.
"""

from __future__ import annotations

import os
import sys
import time

from marin.cli import noop

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TextIO

__all__ = ["Recording", "abandon", "current", "start"]

_MAX_OUTPUT = 1 << 20
"""Characters of output a record keeps at most; a command that prints more leaves no record."""

_NOT_READ = ("/proc/", "/sys/", "/dev/")
"""Pseudo-files read by libraries (``/proc/self/...``) that say nothing of the experiment."""

_current: Recording | None = None
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
        self.seen: dict[str, os.stat_result | None] = {}
        """Each path read or listed, with its ``stat`` when first seen (None: it did not exist)."""
        self.output: list[tuple[int, str]] = []
        self._printed = 0
        self._offered: dict[str, Any] | None = None
        self._ignored = (noop.records_folder(os.environ) + os.sep, *_NOT_READ)

    def abandon(self) -> None:
        """Record nothing more and write no record (the run builds something, or cannot be answered)."""
        self.active = False
        self.seen.clear()
        self.output.clear()
        self._offered = None

    def _note(self, path: Any) -> None:
        if isinstance(path, int):
            return  # a descriptor, opened by path before (noted then)
        path = os.path.abspath(os.fsdecode(os.fspath(path)))
        if path in self.seen or path.startswith(self._ignored) or path.endswith(".pyc"):
            return  # a .pyc is its .py's (every imported module's source is in the record)
        try:
            self.seen[path] = os.stat(path)
        except OSError:
            self.seen[path] = None

    def opened(self, path: Any, mode: Any, flags: Any) -> None:
        """An ``open`` audit event: noted unless the file is opened only to be written (created,
        truncated, appended to)."""
        if isinstance(mode, str):
            reads = "r" in mode or ("a" in mode and "+" in mode)
        else:
            flags = flags if isinstance(flags, int) else 0
            reads = not flags & (os.O_WRONLY | os.O_TRUNC | os.O_EXCL)
        if reads:
            self._note(path)

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

    def offer(self, paths: Mapping[str, os.stat_result | None], index: str, markers: list[str]) -> None:
        """The run was a no-op: what its answer depends on besides what was seen (every path to
        ``stat``, the done index folder and the markers it must hold); written by :meth:`finish`."""
        if self.active:
            self._offered = {"paths": paths, "index": index, "markers": markers}

    def finish(self, ok: bool) -> None:
        """The command ended (``ok``: with exit code 0): write the record it offered, or remove a
        record that no longer holds."""
        global _current
        _current = None
        request, offered = self.request, self._offered if self.active and ok else None
        self.active = False
        try:
            if offered is None:
                noop.remove_record(request)
                return
            paths = {path: None if st is None else noop.stat_key(st) for path, st in offered["paths"].items()}
            noop.write_record(request, noop.record_of(request.key, paths, offered["index"], offered["markers"],
                                                      self.output))
        except OSError as e:  # a read-only home: the next no-op runs in full, nothing else is lost
            import logging  # loaded already by the command that ran

            logging.getLogger(__name__).debug("no-op record %s not written: %s", request.path, e)


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
    if recording is None or not recording.active:
        return
    try:
        if event == "open":
            recording.opened(*args[:3])
        elif event in ("os.listdir", "os.scandir"):
            recording.listed(args[0])
    except Exception:  # noqa: BLE001 - an audit hook must never fail the operation it watches
        recording.abandon()  # what was read is not known for sure: no record


def current() -> Recording | None:
    """The recording of this command, while it records."""
    return _current if _current is not None and _current.active else None


def abandon() -> None:
    """This command will not be a no-op (or cannot be answered): stop recording, write no record."""
    if _current is not None:
        _current.abandon()


def start(request: noop.Request) -> Recording:
    """Begin recording what this command reads and prints, for ``request``'s record."""
    global _current, _hooked
    _current = Recording(request)
    if not _hooked:
        sys.addaudithook(_audit)
        os.register_at_fork(after_in_child=abandon)
        _hooked = True
    sys.stdout = _Tee(sys.stdout, 1)  # type: ignore[assignment]
    sys.stderr = _Tee(sys.stderr, 2)  # type: ignore[assignment]
    return _current
