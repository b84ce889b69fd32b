"""What the experiment's own code calls while a ``marin run`` records, for its no-op record
(:mod:`marin.cli.noop`): anything whose answer no ``stat`` can check next time makes the command
unrecordable, with the reason ``marin run -v`` prints.

Code is told apart by the file it comes from: the standard library, Marin (the workspace's six
packages: its engine and its library of steps and handles), installed packages (``site-packages``),
and the experiment's own code (everything else: the experiment files, the project's helpers). Marin
and the standard library are trusted to answer from what they read (files and folders, which the
recording sees; Marin promises that importing an experiment or planning it reads no store and runs
nothing). The experiment's own code is watched with a profile hook (``sys.setprofile``, on every
thread) from the moment its files are imported until the run ends. A command is unrecordable when
the experiment's code:

* calls into an installed package (``numpy.linspace``, ``pyarrow.parquet.read_table``,
  ``tokenizers.Tokenizer.from_file``): its native code may read files, the clock or the network
  where the recording cannot see. Importing one is not calling it: a module's own import-time code
  is trusted as the standard library's is;
* calls a native function other than the standard library's pure ones (:data:`_SAFE_MODULES`), or
  one of theirs that reads the clock (``time.time``, ``datetime.date.today``, ``datetime.now``), a
  random source (``os.urandom``, the ``random`` module's shared generator, an unseeded
  ``random.Random``), the process id, or the file system behind the recorder's back;
* calls a standard library function that does (:data:`_DENIED`: ``uuid.uuid4``, ``tempfile.mkdtemp``,
  ``secrets``, ``shutil.disk_usage`` ...).

Subprocesses, sockets, SQLite and ``ctypes`` have audit events, which the recorder's audit hook
attributes with :func:`users_call`, looking through Marin's frames as well (a Marin function the
experiment calls at import that lists a bucket is the experiment's doing). Not seen: a native function called by another
native one (``sorted(xs, key=time.time)``), and what ``hash()`` of a string gives when
``PYTHONHASHSEED`` is not set (set iteration order); see docs/caching.md.

Standard library only, like the rest of the recorder.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from marin.cli.noop_watch import real_realpath

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

    from marin.cli.noop_recording import Recording

__all__ = ["ENGINE", "ENGINE_PACKAGES", "INSTALLED", "STDLIB", "USER", "code_kind", "code_kind_of_file", "unwatch", "users_call",
           "watch"]

ENGINE_PACKAGES = ("marin", "rigging", "fray", "iris", "zephyr", "levanter")
"""The workspace's packages: Marin's own code, trusted like the standard library."""

STDLIB = 1
"""Whose code: the standard library's (and the import system's)."""
ENGINE = 2
"""Whose code: Marin's (:data:`ENGINE_PACKAGES`)."""
INSTALLED = 3
"""Whose code: an installed package's (``site-packages``), or the environment's (a console script)."""
USER = 4
"""Whose code: the experiment's own (its files, the project's helpers: everything else)."""

_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_PREFIXES = tuple({os.path.realpath(p).rstrip(os.sep) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
_kinds: dict[str, int] = {}
_engine_dirs: tuple[str, ...] = ()
_recording: Recording | None = None

_SAFE_MODULES = frozenset({
    "builtins", "_abc", "abc", "_operator", "operator", "itertools", "_functools", "functools", "_collections",
    "collections", "math", "cmath", "_json", "json", "_struct", "struct", "_string", "_sre", "re", "binascii",
    "zlib", "_hashlib", "_sha1", "_sha2", "_sha256", "_sha512", "_sha3", "_md5", "_blake2", "hashlib", "_bisect",
    "bisect", "_heapq", "heapq", "_weakref", "weakref", "_io", "io", "_codecs", "codecs", "_csv", "csv",
    "_decimal", "decimal", "array", "unicodedata", "_contextvars", "contextvars", "_thread", "_pickle", "pickle",
    "copyreg", "marshal", "_stat", "stat", "errno", "_warnings", "warnings", "sys", "gc", "_imp", "_typing",
    "typing", "atexit", "_locale", "_tokenize", "_ast", "ast", "_statistics", "_queue", "_elementtree",
    "pyexpat", "_lzma", "_bz2", "_multibytecodec", "_opcode", "_symtable", "faulthandler", "_frozen_importlib",
    "_frozen_importlib_external", "zipimport", "_signal", "types", "enum", "dataclasses", "fnmatch",
    "posixpath", "_datetime", "datetime", "time", "posix", "os", "_random", "random"})
"""Native code of the standard library that answers from its arguments (and the names below it denies)."""

_CLOCK = frozenset({"time", "time_ns", "localtime", "gmtime", "ctime", "asctime", "strftime", "monotonic",
                    "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time", "process_time_ns",
                    "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns"})
_POSIX_DENIED: dict[str, str] = {
    **dict.fromkeys(("urandom", "getrandom"), "a random source"),
    **dict.fromkeys(("getpid", "getppid", "getpgid", "getpgrp", "getsid", "times", "getloadavg", "getlogin",
                     "sched_getaffinity"), "the process and the machine"),
    **dict.fromkeys(("statvfs", "fstatvfs"), "free space"),
    **dict.fromkeys(("getxattr", "listxattr"), "extended attributes"),
    # (os.listdir is not here: its audit event notes the folder listed, whoever lists it)
    **dict.fromkeys(("stat", "lstat", "access", "readlink", "scandir"), "the file system behind the recorder"),
}
_NATIVE_DENIED: dict[str, dict[str, str]] = {
    "time": dict.fromkeys(_CLOCK, "the clock"),
    "datetime": dict.fromkeys(("today", "now", "utcnow"), "the clock"),
    "_datetime": dict.fromkeys(("today", "now", "utcnow"), "the clock"),
    "posix": _POSIX_DENIED,
    "os": _POSIX_DENIED,
}
"""Names of safe modules' native functions that read the clock, a random source, the process or
the file system behind the recorder (its wrappers are Python functions: the real ones are denied)."""

_DENIED: dict[tuple[str, str], str] = {
    ("uuid.py", "uuid1"): "the clock (a time-based id)", ("uuid.py", "uuid4"): "a random source (a random id)",
    **{("tempfile.py", name): "a random source (a random name)"
       for name in ("mkstemp", "mkdtemp", "mktemp", "NamedTemporaryFile", "TemporaryFile", "__init__")},
    ("email/utils.py", "formatdate"): "the clock", ("email/utils.py", "localtime"): "the clock",
    ("email/utils.py", "make_msgid"): "the clock", ("shutil.py", "disk_usage"): "free space",
    ("getpass.py", "getpass"): "the terminal",
}
"""Standard library functions (file relative to the library, name) that read what no ``stat`` sees."""


def _engine_folders() -> tuple[str, ...]:
    import importlib.util  # here: the recording path only

    found = []
    for name in ENGINE_PACKAGES:
        module = sys.modules.get(name)
        locations = getattr(module, "__path__", None)
        if locations is None:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            locations = spec.submodule_search_locations if spec is not None else None
        found += [real_realpath(p).rstrip(os.sep) + os.sep for p in locations or ()]
    return tuple(found)


def _file_kind(file: str) -> int:
    global _engine_dirs
    if not _engine_dirs:
        _engine_dirs = _engine_folders()
    real = real_realpath(file)
    if real.startswith(_engine_dirs):
        return ENGINE
    parts = real.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return INSTALLED
    if real.startswith(_STDLIB_DIR):
        return STDLIB
    # The environment's own files: console scripts (the `marin` script's frame is under every call).
    return INSTALLED if real.startswith(_PREFIXES) else USER


def code_kind(frame: FrameType) -> int:
    """Whose code ``frame`` runs: :data:`STDLIB`, :data:`ENGINE`, :data:`INSTALLED` or :data:`USER`."""
    file = frame.f_code.co_filename
    kind = _kinds.get(file)
    if kind is not None:
        return kind
    if file.startswith("<frozen"):
        kind = _kinds[file] = STDLIB
    elif file.startswith(os.sep):
        kind = _kinds[file] = _file_kind(file)
    else:  # <string> and its kind: code generated for a module (a dataclass's __init__) is that module's
        module_file = frame.f_globals.get("__file__")
        kind = code_kind_of_file(module_file) if isinstance(module_file, str) and module_file.startswith(os.sep) \
            else USER
    return kind


def code_kind_of_file(file: str) -> int:
    """Whose code the (absolute) ``file`` holds, as :func:`code_kind` says."""
    kind = _kinds.get(file)
    if kind is None:
        kind = _kinds[file] = _file_kind(file)
    return kind


def _where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def users_call(frame: FrameType | None, *, through_marin: bool = False) -> str | None:
    """Where the experiment's own code made the call running in ``frame`` ("file:line"), or None when
    the call is Marin's, or is part of importing a module (its import-time code), or has no caller in
    the experiment's code. Frames of the standard library and installed packages are looked through,
    and Marin's too with ``through_marin`` (a subprocess or the network used by a Marin function the
    experiment called at import is the experiment's doing: ``rigging.filesystem`` listing a bucket)."""
    while frame is not None:
        kind = code_kind(frame)
        if kind == USER:
            return _where(frame)
        if (kind == ENGINE and not through_marin) or frame.f_code.co_name == "<module>":
            return None
        frame = frame.f_back
    return None


def _defining(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO that defines ``name``."""
    for base in getattr(cls, "__mro__", (cls,)):
        if name in getattr(base, "__dict__", {}):
            return base
    return cls


def _native_refusal(fn: Any) -> str | None:
    """Why the experiment's code may not call the native function ``fn`` while recording, or None."""
    name = getattr(fn, "__name__", "?")
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, ModuleType):
        module, qualname = owner.__name__, name
    else:
        cls = getattr(fn, "__objclass__", None)
        if cls is None and owner is not None:
            cls = _defining(owner if isinstance(owner, type) else type(owner), name)
        module = getattr(cls, "__module__", None) if cls is not None else getattr(fn, "__module__", None)
        module = module if isinstance(module, str) else "?"
        qualname = f"{getattr(cls, '__qualname__', '?')}.{name}" if cls is not None \
            else getattr(fn, "__qualname__", name)
    what = f"{module}.{qualname}" if module != "?" else qualname
    if module not in _SAFE_MODULES:
        return f"{what}, native code (of an installed package or extension) whose reads the recording cannot see"
    denied = _NATIVE_DENIED.get(module, {}).get(name)
    if denied is not None:
        return f"{what}, which reads {denied}"
    if module in ("_random", "random") and owner is not None and _shared_random(owner):
        return f"random.{name}, which reads a random source (the random module's generator, seeded by the system)"
    return None


def _shared_random(instance: Any) -> bool:
    random = sys.modules.get("random")
    return random is not None and (instance is getattr(random, "_inst", None)
                                   or isinstance(instance, getattr(random, "SystemRandom", ())))


def _python_refusal(frame: FrameType, kind: int) -> str | None:
    """Why the experiment's code may not call the Python function running in ``frame`` (of the
    standard library or an installed package) while recording, or None."""
    code = frame.f_code
    if kind == INSTALLED:
        module = frame.f_globals.get("__name__", "?")
        package = module.partition(".")[0] if isinstance(module, str) else "?"
        return (f"into the installed package {package} ({module}.{code.co_qualname}), whose native code may read "
                "what the recording cannot see")
    file = code.co_filename
    relative = file[len(_STDLIB_DIR):] if file.startswith(_STDLIB_DIR) else file
    denied = _DENIED.get((relative, code.co_name))
    if denied is not None:
        return f"{relative[:-3].replace(os.sep, '.')}.{code.co_qualname}, which reads {denied}"
    if relative == "secrets.py":
        return f"secrets.{code.co_qualname}, which reads a random source"
    if relative == "random.py":
        args = frame.f_locals
        if _shared_random(args.get("self")) or (code.co_name in ("__init__", "seed")
                                                and args.get("x", args.get("a", 0)) is None):
            return f"random.{code.co_qualname}, which reads a random source (a generator seeded by the system)"
    return None


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    # Called on every call and return while watching (the whole plan): the cheapest tests first.
    if event != "call" and event != "c_call":
        return  # a return or an exception: nothing is called
    recording = _recording
    if recording is None or not recording.active:
        sys.setprofile(None)  # this thread's hook, left from a recording that ended
        return
    kind = _kinds.get(frame.f_code.co_filename) or code_kind(frame)
    if event == "c_call":
        if kind == USER:
            why = _native_refusal(arg)
            if why is not None:
                recording.refuse(f"{_where(frame)} calls {why}")
        return
    if kind == ENGINE or kind == USER or frame.f_code.co_name == "<module>":
        return
    caller = frame.f_back
    if caller is None or code_kind(caller) != USER:
        return
    why = _python_refusal(frame, kind)
    if why is not None:
        recording.refuse(f"{_where(caller)} calls {why}")


def watch(recording: Recording) -> bool:
    """Watch what the experiment's code calls, for ``recording``, from now on, on every thread; False
    (and nothing watched) when another profiler is installed (the command is then unrecordable)."""
    global _recording
    if sys.getprofile() not in (None, _profile):
        return False
    import threading  # here: the recording path only

    _recording = recording
    threading.setprofile(_profile)
    sys.setprofile(_profile)
    return True


def unwatch() -> None:
    """Stop watching (each other thread drops its hook at its next call)."""
    global _recording
    _recording = None
    if sys.getprofile() is _profile:
        sys.setprofile(None)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading.setprofile(None)  # type: ignore[attr-defined]
