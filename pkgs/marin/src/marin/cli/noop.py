"""The no-op record: a repeated, unchanged ``marin run`` answered from ``stat`` calls, as Make
answers from timestamps, without importing the experiment or hashing its graph.

A ``marin run`` that ends with every step cached (or unneeded) writes a record of what that
answer depended on (:mod:`marin.cli.noop_recording`, :mod:`marin.cli.noop_depends`):

* every file the command read outside the store's own folders (the experiment files, the data
  they read at import, every imported module, the configuration files; under the prefix too,
  but for its bookkeeping, its reports and the plan's outputs) with its ``stat`` (modification
  time in ns, size, inode, device, mode, owner, change time), every folder it listed (import
  searches, globs) with its own, and the files it looked for and did not find (the
  configuration's places, ``sys.path`` entries);
* the content digest of each small file it read (:data:`DIGESTED_SIZE`);
* every other question it asked the file system outside the store, with the answer it got
  (:data:`QUESTIONS`: ``os.stat`` and ``os.lstat`` of a path it never opened, ``os.path.exists``,
  ``isfile``, ``isdir``, ``islink``, ``realpath``, ``os.access``, ``os.readlink``, an access or
  change time), asked again on the next command;
* every local file a step's ``source(...)`` covers (a record is written only when every source
  is local: an object store or the Hugging Face Hub cannot be asked by ``stat``);
* each step's success record (``stat`` again; an unneeded step's must stay absent) and its
  marker in the store's done index (one listing for them all);
* what the command printed.

The record is kept beside the stat cache (``MARIN_STAT_CACHE``'s folder, else
``$XDG_CACHE_HOME/marin`` or ``~/.cache/marin``), in ``noop/``, under a key that digests the
command line, the working folder, the Python executable and ``sys.path``, the machine
(``os.uname()``: host name, kernel; ``os.cpu_count()``), whether standard input, stdout and stderr are terminals, and the whole environment
but :data:`IGNORED_VARIABLES`. The next identical
command finds it, ``stat``s everything in it and lists the done index: when nothing moved it
prints what the recorded run printed and exits 0; anything changed, missing or unreadable, and
the command runs in full (writing a new record if it is a no-op again).

A command whose answer could change with nothing of that changed (it ran a subprocess, opened a
socket or an SQLite database, called native code of an installed package, read the clock, a
random source or standard input) leaves no record (:mod:`marin.cli.noop_recording`).

Only plain ``marin run TARGET...`` with ``--prefix``, ``-j``, ``--only``, ``--budget``,
``--budget-accelerator-hours``, ``--[no-]warm-workers`` or ``--code-changes warn`` is answered
(``--require-cached``, CI's gate, is always answered in full); ``MARIN_NO_FAST_NOOP=1``, ``--no-fast`` or
``fast_noop: false`` in the configuration turn it off.

This module is imported before click and the engine (:mod:`marin.cli.main`), so it uses the
standard library only: the answer must cost a few milliseconds over the interpreter's start.
"""

from __future__ import annotations

import errno
import hashlib
import marshal
import os
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ["DISABLE_VARIABLE", "IGNORED_VARIABLES", "QUESTIONS", "RECORD_FORMAT", "Request", "answer", "ask", "debug",
           "error_answer", "record_of", "records_folder", "remove_record", "request_of", "stat_key", "why_changed",
           "write_record"]

RECORD_FORMAT = 3
"""The form of the records this code writes; a record of another form is not read."""

DISABLE_VARIABLE = "MARIN_NO_FAST_NOOP"
"""Set (to anything but ``""`` or ``0``), ``marin run`` neither answers from nor writes a record."""

IGNORED_VARIABLES = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "TERM", "COLORTERM", "COLUMNS", "LINES",
                               "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY"})
"""Environment variables left out of the key: the shell's own bookkeeping and the terminal's
size and kind, which change neither a plan nor what a no-op prints. Every other variable is in
the key, so a changed one (``EXPERIMENTS_SCALE``, ``HF_HOME``, ``MARIN_PREFIX``) runs in full."""

_KEEP = 64
"""Records kept per user (the newest): one per distinct command line and environment."""

# `marin run`'s options the record may answer (with a value, or alone). Any other (--force,
# --dry-run, --cache, --strict-env, --backend ...) takes the full path every time.
_VALUED = frozenset({"--prefix", "-j", "--max-parallel", "--only", "--budget", "--budget-accelerator-hours",
                     "--code-changes"})
_FLAGS = frozenset({"--warm-workers", "--no-warm-workers"})  # never --require-cached: CI's gate plans in full
_VERBOSE = frozenset({"-v", "--verbose"})

_SUFFIX = ".noop"
# A record is a dict written with marshal, as Python's own bytecode caches are: read without
# importing anything (json alone would cost a quarter of the answer), by the interpreter that
# wrote it (its version is in the key). Its keys (one place: the writer and the reader below):
_FORMAT, _KEY, _PATHS, _CHECKS, _DIGESTS, _INDEX, _MARKERS, _OUTPUT = (
    "format", "key", "paths", "checks", "digests", "index", "markers", "output")


class Request:
    """A ``marin run`` command line the record may answer."""

    __slots__ = ("key", "path", "verbose")

    def __init__(self, key: str, path: str, verbose: bool):
        self.key = key
        """Digest of everything the answer is keyed by (see the module's docstring)."""
        self.path = path
        """Where its record is."""
        self.verbose = verbose
        """``-v``: say on stderr whether the record answered, and why not."""


def records_folder(environ: Mapping[str, str]) -> str:
    """Where records are kept: ``noop/`` beside the stat cache (the folder
    ``marin.execution.store.stat_cache.stat_cache_path`` names, not imported here: it would load
    the engine; a test holds the two together)."""
    if environ.get("MARIN_STAT_CACHE"):
        base = os.path.dirname(os.path.expanduser(environ["MARIN_STAT_CACHE"]))
    else:
        base = os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "marin")
    return os.path.join(base, "noop")


def _answerable(run_args: Sequence[str]) -> tuple[list[str], bool] | None:
    """``marin run``'s arguments less ``-v`` (which changes no answer), and whether it was given;
    None unless they are ones a record may answer: targets and the options above."""
    kept: list[str] = []
    verbose = False
    targets = 0
    i = 0
    while i < len(run_args):
        arg = run_args[i]
        i += 1
        if arg in _VERBOSE:
            verbose = True
            continue
        kept.append(arg)
        name, eq, value = arg.partition("=")
        if not arg.startswith("-"):
            targets += 1
        elif name in _VALUED and name.startswith("--") and eq:
            if name == "--code-changes" and value != "warn":
                return None
        elif arg in _VALUED:
            if i >= len(run_args) or (arg == "--code-changes" and run_args[i] != "warn"):
                return None
            kept.append(run_args[i])
            i += 1
        elif arg not in _FLAGS:
            return None
    return (kept, verbose) if targets else None


def request_of(args: Sequence[str], environ: Mapping[str, str] | None = None) -> Request | None:
    """The request ``marin ARGS`` makes of the record, or None when no record may answer it (another
    verb, an option the record does not answer, :data:`DISABLE_VARIABLE` set). ``-v`` before or
    after the verb is not part of the key: it only says on stderr what the record did."""
    environ = os.environ if environ is None else environ
    if environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return None
    verbose = False
    rest = list(args)
    while rest and rest[0] in _VERBOSE:
        verbose = True
        rest.pop(0)
    parsed = _answerable(rest[1:]) if rest and rest[0] == "run" else None
    if parsed is None:
        return None
    run_args, verbose_after = parsed
    try:
        cwd = os.getcwd()
    except OSError:  # the working folder was removed
        return None
    streams = tuple(_isatty(s) for s in (sys.stdin, sys.stdout, sys.stderr))
    env = sorted((k, v) for k, v in environ.items() if k not in IGNORED_VARIABLES)
    interpreter = (sys.executable, sys.version, sys.flags, getattr(sys, "_xoptions", None), sys.path)
    # A home shared by hosts: a record answers on the host that wrote it, with as many processors.
    machine = (*os.uname(), os.cpu_count())
    material = repr((RECORD_FORMAT, "run", run_args, cwd, interpreter, machine, streams, env))
    key = hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()
    return Request(key, os.path.join(records_folder(environ), f"{key[:32]}{_SUFFIX}"), verbose or verbose_after)


def _isatty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # closed, or no stream at all
        return False


def stat_key(st: os.stat_result) -> list[int]:
    """What a record keeps of a ``stat``: modification time (ns), size, inode, device, mode, owner, group,
    and the change time (ns): a write with the modification time put back (``touch -d``) moves it."""
    return [st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev, st.st_mode, st.st_uid, st.st_gid, st.st_ctime_ns]


DIGESTED_SIZE = 1 << 16
"""A regular file the command read, of at most this many bytes, is kept in its record with the
digest of its content as well (:func:`content_digest`), checked again by the next command: what a
file system whose times are coarse or put back cannot tell is still seen, for the price of reading
a few small files."""


def content_digest(path: str) -> str | None:
    """SHA-256 of the file's content; None where it cannot be read (absent, a folder)."""
    try:
        with open(path, "rb", buffering=0) as f:
            return hashlib.sha256(f.read(DIGESTED_SIZE + 1)).hexdigest()
    except OSError:
        return None


_ABSENT = (errno.ENOENT, errno.ENOTDIR)


def error_answer(error: OSError) -> int | None:
    """What a record keeps of a failed question: None where the path is absent, else the negated
    error number (never a valid answer of another kind)."""
    return None if error.errno in _ABSENT else -(error.errno or 1)


STAT, LSTAT, KIND, LKIND, ACCESS, REALPATH, READLINK, ATIME, CTIME = (
    "stat", "lstat", "kind", "lkind", "access", "realpath", "readlink", "atime", "ctime")
QUESTIONS = (STAT, LSTAT, KIND, LKIND, ACCESS, REALPATH, READLINK, ATIME, CTIME)
"""What a record may ask of a path again: its ``stat`` (following a symbolic link or not), its kind
(the file type bits of that ``stat``: what ``exists``, ``isfile``, ``isdir`` and ``islink`` answer
from), ``os.access``, ``realpath``, ``readlink``, its access or change time. The recorder
(:mod:`marin.cli.noop_watch`) notes the answer each call got in the form :func:`ask` gives it."""

_FILE_TYPE = 0o170000  # stat.S_IFMT's mask, without importing stat


def ask(kind: str, path: str, arg: object = None) -> object:
    """The answer to question ``kind`` about ``path`` now, as a record keeps it: a ``stat`` as
    :func:`stat_key`, a kind as the file type bits, a time in ns, a path, a yes or no; None where the
    path is absent, the negated error number where asking failed otherwise.

    Args:
        kind: one of :data:`QUESTIONS`.
        path: an absolute path.
        arg: ``os.access``'s mode (or ``[mode, effective_ids, follow_symlinks]``), ``realpath``'s ``strict``.

    Raises:
        ValueError: ``kind`` is not one of :data:`QUESTIONS`.
    """
    if kind == ACCESS:
        mode, effective, follow = arg if isinstance(arg, list) else (arg, False, True)
        return os.access(path, mode if isinstance(mode, int) else os.F_OK, effective_ids=bool(effective),
                         follow_symlinks=bool(follow))
    try:
        if kind in (STAT, LSTAT, KIND, LKIND, ATIME, CTIME):
            st = os.stat(path, follow_symlinks=kind not in (LSTAT, LKIND))
            if kind in (KIND, LKIND):
                return st.st_mode & _FILE_TYPE
            return st.st_atime_ns if kind == ATIME else st.st_ctime_ns if kind == CTIME else stat_key(st)
        if kind == REALPATH:
            return os.path.realpath(path, strict=bool(arg))
        if kind == READLINK:
            return os.readlink(path)
    except OSError as e:
        return error_answer(e)
    except ValueError:  # a path with a NUL in it: no such file
        return None
    raise ValueError(f"not a question a no-op record asks: {kind!r}")


def record_of(key: str, paths: Mapping[str, list[int] | int | None], checks: Iterable[tuple[str, str, object, object]],
              index: str, markers: Iterable[str], output: Iterable[tuple[int, str]],
              digests: Mapping[str, str] | None = None) -> dict[str, object]:
    """A record (what :func:`write_record` writes).

    Args:
        key: the request's key.
        paths: each path looked at, with :func:`ask` ``(STAT, path)``'s answer: :func:`stat_key` of it,
            None where it must not exist.
        checks: the other questions asked, each (kind, path, arg, answer) as :func:`ask` gives it.
        index: the store's done index folder.
        markers: the file names in ``index`` that must still be there (the done steps').
        output: what the command printed, in order: (1 stdout or 2 stderr, text).
        digests: the small files it read (:data:`DIGESTED_SIZE`), each with :func:`content_digest` of it.
    """
    return {_FORMAT: RECORD_FORMAT, _KEY: key, _PATHS: dict(paths), _CHECKS: [list(c) for c in checks],
            _DIGESTS: dict(digests or {}), _INDEX: index, _MARKERS: list(markers),
            _OUTPUT: [[stream, text] for stream, text in output]}


def _path_changed(path: str, want: list[int] | int | None) -> str | None:
    try:
        st = os.stat(path)
    except OSError as e:
        now = error_answer(e)
        if now == want:
            return None
        return f"{path} is gone" if now is None else f"{path} cannot be read ({errno.errorcode.get(-now, now)})"
    if want is None:
        return f"{path} appeared"
    return None if stat_key(st) == want else f"{path} changed"


def why_changed(record: object, key: str) -> str | None:
    """Why ``record`` does not answer the request with ``key`` now (a path moved, a step is no longer
    done ...), or None when it does: every path ``stat``s as recorded, every other question gets the
    answer it got, and the done index, listed once, still holds every marker."""
    if not isinstance(record, dict) or record.get(_FORMAT) != RECORD_FORMAT or record.get(_KEY) != key:
        return "it is of another form or for another command"
    try:
        for path, want in record[_PATHS].items():
            why = _path_changed(path, want)
            if why is not None:
                return why
        for kind, path, arg, want in record[_CHECKS]:
            now = ask(kind, path, arg)
            if now != want:
                return f"{path}: {kind} was {want!r}, now {now!r}"
        for path, want in record[_DIGESTS].items():
            if content_digest(path) != want:
                return f"{path}: its content changed"
        index = record[_INDEX]
        try:
            listed = set(os.listdir(index))
        except OSError:
            return f"the done index {index} cannot be listed"
        for marker in record[_MARKERS]:
            if marker not in listed:
                return f"{marker} is no longer in the done index"
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        return f"it cannot be read ({type(e).__name__})"
    return None


def debug(request: Request, message: str) -> None:
    """``message`` on stderr under ``-v``, in the form of the command's debug log lines."""
    if request.verbose:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} DEBUG {__name__}: {message}\n")


def answer(request: Request) -> bool:
    """Print the recorded output and return True when the request's record holds; False (and
    nothing printed but a debug line) when there is none or it does not hold."""
    try:
        with open(request.path, "rb") as f:
            data = f.read()
    except OSError:
        debug(request, f"no no-op record for this command ({request.path}); running in full")
        return False
    try:
        record = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        record = None
    why = why_changed(record, request.key)
    if why is not None:
        debug(request, f"the no-op record {request.path} does not hold: {why}; running in full")
        return False
    for stream, text in record[_OUTPUT]:  # type: ignore[index]  (why_changed checked it is a record)
        (sys.stdout if stream == 1 else sys.stderr).write(text)
    sys.stdout.flush()
    counts = f"{len(record[_PATHS])} paths, {len(record[_CHECKS])} other questions and "  # type: ignore[index]
    debug(request, f"answered from the no-op record {request.path}: {counts}{len(record[_MARKERS])} done "  # type: ignore[index]
                   "markers unchanged (MARIN_NO_FAST_NOOP=1 or --no-fast runs in full)")
    return True


def write_record(request: Request, record: Mapping[str, object]) -> None:
    """Write ``record`` for ``request`` (atomically), keeping the newest :data:`_KEEP` records.

    Raises:
        OSError: the records folder cannot be written.
    """
    folder = os.path.dirname(request.path)
    os.makedirs(folder, exist_ok=True)
    temporary = f"{request.path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as f:
        f.write(marshal.dumps(record))
    os.replace(temporary, request.path)
    _prune(folder)


def _prune(folder: str) -> None:
    entries = []
    for entry in os.scandir(folder):
        if entry.name.endswith(_SUFFIX):
            try:
                entries.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                continue  # removed meanwhile by another command's pruning
    for _mtime, path in sorted(entries, reverse=True)[_KEEP:]:
        try:
            os.remove(path)
        except FileNotFoundError:
            continue


def remove_record(request: Request) -> None:
    """Remove the request's record, if any (it no longer holds and the command was no no-op)."""
    try:
        os.remove(request.path)
    except FileNotFoundError:
        return
