"""The file-system questions a recording ``marin run`` asks, each noted with the answer it got, for
its no-op record (:mod:`marin.cli.noop`).

An audit hook sees files opened and folders listed (:mod:`marin.cli.noop_recording`), but Python
raises no audit event for ``os.stat`` and its family: an experiment that sets a field from
``os.path.exists(flag)`` would be answered from a record that never looked at ``flag``. So while a
command records, these are replaced by wrappers that note each question with the answer the call
got, in the form :func:`marin.cli.noop.ask` asks it again on the next command:

* ``os.stat``, ``os.lstat``, ``os.access``, ``os.readlink``, and the entries ``os.scandir`` yields
  (:mod:`marin.cli.noop_entries`);
* ``os.open`` of a path relative to a folder descriptor (``dir_fd``, as ``os.fwalk`` opens and
  ``open(name, opener=...)`` may): noted as the file it names, where the audit event gives only the
  name (a folder that cannot be told makes the command unrecordable); a path relative to a folder
  descriptor given to the ``stat`` family is resolved the same way;
* ``os.read`` and ``os.readv`` of standard input make the command unrecordable (what it holds no
  ``stat`` can check; ``sys.stdin`` itself is guarded by :mod:`marin.cli.noop_recording`);
* ``os.path.exists``, ``lexists``, ``isfile``, ``isdir``, ``islink`` (each answered from one
  ``stat`` whose file type is what is noted), ``realpath``, ``getatime``, ``getctime``
  (``getmtime`` and ``getsize`` are ``os.stat``'s), and ``pathlib.Path.exists``, ``is_file``,
  ``is_dir``, ``is_symlink`` (``Path.stat`` and ``Path.resolve`` go through the above). ``glob``,
  ``os.walk`` and ``Path.glob`` are made of these.

A question asked inside another (``realpath`` ``lstat``s each folder of its path) is noted once, as
the outer one. Questions about kernel and device files (``/proc``, ``/sys``, ``/dev``) cannot be
checked by asking again: asked by the experiment's own code they make the command unrecordable;
asked by Marin or a library it imports, they are not noted. ``os.statvfs`` (free space) makes the
command unrecordable when the experiment asks. The wrappers are removed when the recording ends;
a module that bound one meanwhile (``from os import stat``) keeps a wrapper that only calls through.

Standard library only, like the rest of the recorder: it is loaded before click and the engine.
"""

from __future__ import annotations

import os
import posixpath
import sys
from _thread import _local

from marin.cli import noop

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from marin.cli.noop_recording import Recording

__all__ = ["BUSY", "PSEUDO", "absolute", "busy", "install", "named", "note", "path_of", "real_realpath", "real_stat",
           "recording", "uninstall"]

PSEUDO = ("/proc/", "/sys/", "/dev/")
"""Kernel and device files: what they hold is not told by ``stat``."""

real_stat = os.stat
"""``os.stat`` as it was before any wrapper (the recorder's own ``stat`` calls)."""
_realpath = os.path.realpath
_readlink = os.readlink

_IGNORED_ERRORS = (2, 20, 9, 40)  # ENOENT, ENOTDIR, EBADF, ELOOP: pathlib's "no" rather than an error
_S_IFDIR, _S_IFREG, _S_IFLNK = 0o040000, 0o100000, 0o120000

_recording: Recording | None = None


def _never(fd: int) -> bool:
    return False


_is_stdin: Callable[[int], bool] = _never  # what noop_recording.start says standard input is (install)
_inside = _local()  # per thread: a wrapper is running (its own calls are not noted again)
_saved: list[tuple[Any, str, Any]] = []  # (owner, attribute, original) of every wrapper installed


def absolute(path: Any) -> str | None:
    """The path a call names, made absolute from the working folder but not normalised (``link/..``
    and a trailing ``/`` mean what the kernel makes of them); None for a descriptor (opened by
    path, noted then) or an argument that is no path (the real call raises its own error)."""
    if isinstance(path, int):
        return None
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return None
    return text if text.startswith(os.sep) else posixpath.join(os.getcwd(), text)


def path_of(path: Any, dir_fd: Any = None) -> str | None:
    """:func:`absolute`, for a path that may be relative to a folder descriptor."""
    if dir_fd is not None and not isinstance(path, int):
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            return None
        if not text.startswith(os.sep):
            try:
                return posixpath.join(_readlink(f"/proc/self/fd/{dir_fd}"), text)  # the recorder's own question
            except OSError:
                _refuse("it asked about a path relative to a folder descriptor")
                return None
    return absolute(path)


def _refuse(reason: str) -> None:
    if _recording is not None:
        _recording.refuse(reason)


def note(kind: str, path: str | None, arg: Any, answer: Any) -> None:
    """Note question ``kind`` about ``path`` (absolute, or None: nothing noted) and its answer."""
    recording = _recording
    if recording is None or not recording.active or path is None:
        return
    if path.startswith(PSEUDO) or path.rstrip(os.sep) in ("/proc", "/sys", "/dev"):
        from marin.cli.noop_calls import users_call  # the standard library only

        where = users_call(_caller())
        if where is not None:
            recording.refuse(f"{where} asks about {path}, which stat cannot check")
        return
    recording.asked(kind, path, arg, answer)


def recording() -> Recording | None:
    """The recording whose questions are noted, while one is."""
    return _recording


def busy() -> bool:
    """Whether this thread is inside one of the wrappers (whose own calls' audit events are not noted:
    the wrapper notes what they mean)."""
    return getattr(_inside, "busy", False)


def real_realpath(path: str) -> str:
    """``os.path.realpath`` of ``path``, not noted (the recorder's own question)."""
    was = getattr(_inside, "busy", False)
    _inside.busy = True
    try:
        return _realpath(path)
    finally:
        _inside.busy = was


def _caller() -> Any:
    """The frame that called into this module's wrappers."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals is globals():
        frame = frame.f_back
    return frame


class _Busy:
    """Marks this thread inside a wrapper for the ``with`` block: nested calls are not noted."""

    def __enter__(self) -> bool:
        was = getattr(_inside, "busy", False)
        _inside.busy = True
        return not was and _recording is not None and _recording.active

    def __exit__(self, *exc: object) -> None:
        _inside.busy = False


BUSY = _Busy()
"""``with BUSY as noting:`` a wrapper's own call (``noting``: the outermost, while a recording is active)."""


def named(wrapper: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(wrapper, attribute, getattr(real, attribute))
        except (AttributeError, TypeError):
            continue
    wrapper.__wrapped__ = real  # type: ignore[attr-defined]
    return wrapper


def _stat_wrapper(real: Callable[..., Any], follow_default: bool) -> Callable[..., Any]:
    """``os.stat`` (``follow_default``) or ``os.lstat``."""

    def call(path: Any, dir_fd: Any, follow_symlinks: bool) -> Any:
        if follow_default:
            return real(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        return real(path, dir_fd=dir_fd)

    def stat(path: Any, *, dir_fd: Any = None, follow_symlinks: bool = True) -> Any:
        if getattr(_inside, "busy", False) or _recording is None:
            return call(path, dir_fd, follow_symlinks)
        kind = noop.STAT if follow_symlinks and follow_default else noop.LSTAT
        with BUSY as noting:
            try:
                st = call(path, dir_fd, follow_symlinks)
            except OSError as e:
                if noting:
                    note(kind, path_of(path, dir_fd), None, noop.error_answer(e))
                raise
            if noting:
                note(kind, path_of(path, dir_fd), None, st)
            return st

    return named(stat, real)


def _kind_question(real: Callable[..., Any], follow: bool, test: Callable[[Any], bool], pathlib: bool,
                   ) -> Callable[..., Any]:
    """``exists``, ``isfile``, ``isdir``, ``islink``, ``lexists`` or a ``Path`` method of the same name,
    answered from one ``stat`` (the answer the caller gets and the one noted are the same)."""
    kind = noop.KIND if follow else noop.LKIND

    def question(path: Any, *, follow_symlinks: bool = True) -> Any:
        where = path_of(path)
        if getattr(_inside, "busy", False) or _recording is None or where is None:
            return real(path) if follow_symlinks else real(path, follow_symlinks=False)
        asked = kind if follow_symlinks else noop.LKIND
        with BUSY as noting:
            answer = noop.ask(asked, where)
            if noting:
                note(asked, where, None, answer)
        if pathlib and isinstance(answer, int) and answer < 0 and -answer not in _IGNORED_ERRORS:
            raise OSError(-answer, os.strerror(-answer), str(path))
        return isinstance(answer, int) and answer > 0 and test(answer)

    return named(question, real)


def _result_question(real: Callable[..., Any], kind: str, answer_of: Callable[[Any], Any],
                     arg_of: Callable[..., Any] = lambda *args, **kwargs: None) -> Callable[..., Any]:
    """A question whose answer is its result (``realpath``, ``readlink``, ``access``, a time)."""

    def question(path: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "busy", False) or _recording is None:
            return real(path, *args, **kwargs)
        with BUSY as noting:
            try:
                result = real(path, *args, **kwargs)
            except OSError as e:
                if noting:
                    note(kind, path_of(path, kwargs.get("dir_fd")), arg_of(*args, **kwargs), noop.error_answer(e))
                raise
            if noting:
                note(kind, path_of(path, kwargs.get("dir_fd")), arg_of(*args, **kwargs), answer_of(result))
            return result

    return named(question, real)


def _access_arg(mode: Any, *, dir_fd: Any = None, effective_ids: bool = False, follow_symlinks: bool = True) -> Any:
    return mode if not effective_ids and follow_symlinks else [mode, effective_ids, follow_symlinks]


def _time_question(kind: str) -> Callable[..., Any]:
    """``getatime`` or ``getctime``, the time noted in ns."""
    real = posixpath.getatime if kind == noop.ATIME else posixpath.getctime

    def question(path: Any) -> float:
        if getattr(_inside, "busy", False) or _recording is None:
            return real(path)
        with BUSY as noting:
            try:
                st = real_stat(path)
            except OSError as e:
                if noting:
                    note(kind, path_of(path), None, noop.error_answer(e))
                raise
            if noting:
                note(kind, path_of(path), None, st.st_atime_ns if kind == noop.ATIME else st.st_ctime_ns)
        return st.st_atime if kind == noop.ATIME else st.st_ctime

    return named(question, real)


def _statvfs(real: Callable[..., Any]) -> Callable[..., Any]:
    def statvfs(path: Any) -> Any:
        if _recording is not None and _recording.active and not getattr(_inside, "busy", False):
            from marin.cli.noop_calls import users_call

            where = users_call(_caller())
            if where is not None:
                _recording.refuse(f"{where} asks for a file system's free space (os.statvfs)")
        return real(path)

    return named(statvfs, real)


def _open(real: Callable[..., Any]) -> Callable[..., Any]:
    """``os.open``: a path relative to a folder descriptor (``dir_fd``, as ``os.fwalk`` opens) is noted as
    the file it names (the audit event gives only the name); one whose folder cannot be told makes
    the command unrecordable."""

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if dir_fd is None or getattr(_inside, "busy", False) or _recording is None or not _recording.active:
            return real(path, flags, mode, dir_fd=dir_fd)
        where = path_of(path, dir_fd)
        with BUSY as noting:
            fd = real(path, flags, mode, dir_fd=dir_fd)
        if noting and where is not None:
            _recording.opened(where, None, flags)
        return fd

    return named(open_, real)


def _read(real: Callable[..., Any]) -> Callable[..., Any]:
    """``os.read`` (and ``os.readv``): reading standard input makes the command unrecordable."""

    def read(fd: int, *args: Any) -> Any:
        recording = _recording
        if recording is not None and recording.active and _is_stdin(fd):
            from marin.cli.noop_calls import users_call

            where = users_call(_caller(), through_marin=True) or "the command"
            recording.refuse(f"{where} reads standard input (os.{real.__name__} of descriptor {fd}), "
                             "which no stat can check")
        return real(fd, *args)

    return named(read, real)


def _replace(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
    real = getattr(owner, name)
    _saved.append((owner, name, real))
    setattr(owner, name, make(real))


def install(recording: Recording, is_stdin: Callable[[int], bool] | None = None) -> None:
    """Note ``recording``'s file-system questions from now on (see the module's docstring); ``is_stdin``
    tells a descriptor of standard input (read, it makes the command unrecordable)."""
    global _recording, _is_stdin
    _recording = recording
    if is_stdin is not None:
        _is_stdin = is_stdin
    if _saved:
        return
    import pathlib  # here: the recording path only (the answer never loads it)

    from marin.cli.noop_entries import scandir_wrapper  # here, as pathlib (it imports this module)

    _replace(os, "stat", lambda real: _stat_wrapper(real, True))
    _replace(os, "lstat", lambda real: _stat_wrapper(real, False))
    _replace(os, "access", lambda real: _result_question(real, noop.ACCESS, bool, _access_arg))
    _replace(os, "readlink", lambda real: _result_question(real, noop.READLINK, os.fsdecode))
    _replace(os, "scandir", scandir_wrapper)
    _replace(os, "open", _open)
    _replace(os, "read", _read)
    _replace(os, "readv", _read)
    _replace(os, "statvfs", _statvfs)
    _replace(posixpath, "realpath", lambda real: _result_question(
        real, noop.REALPATH, os.fsdecode, lambda *args, strict=False: bool(args[0] if args else strict)))
    _replace(posixpath, "getatime", lambda real: _time_question(noop.ATIME))
    _replace(posixpath, "getctime", lambda real: _time_question(noop.CTIME))
    for owner, names, pathlib_style in ((posixpath, ("exists", "isfile", "isdir", "lexists", "islink"), False),
                                        (pathlib.Path, ("exists", "is_file", "is_dir", "is_symlink"), True)):
        for name in names:
            follow = name not in ("lexists", "islink", "is_symlink")
            wanted = (_S_IFREG if "file" in name else _S_IFDIR if "dir" in name
                      else _S_IFLNK if "link" in name else 0)
            test = (lambda bits, wanted=wanted: bits == wanted) if wanted else (lambda bits: True)
            _replace(owner, name, lambda real, f=follow, t=test, p=pathlib_style: _kind_question(real, f, t, p))


def uninstall() -> None:
    """Put every wrapped function back (the recording ended)."""
    global _recording
    _recording = None
    while _saved:
        owner, name, real = _saved.pop()
        setattr(owner, name, real)
