"""What a warm template (:mod:`fray.pool`) imports: the rule that keeps it safe to fork, and
what it learns from the calls forked from it.

A template may be forked only while it is safe to fork and while what it holds is what a fresh
interpreter would hold: one thread (forking a multi-threaded process is unsafe) and none of the
packages that must initialise in each call's own process (``never_in_template``: JAX chooses its
devices and starts its threads when first imported). :func:`fork_hazard` is that rule; every import
into a template is checked against it.

Learning: a call reports the modules it imported (:func:`imported_since`); the template imports
them too, so that later calls find them imported. Such an import is speculative (no call asked for
it), so it is first tried in a throwaway fork of the template, a *probe*, one module at a time, in
the order the call imported them; only what the probe imported safely is imported into the
template. A module that failed, started a thread, asked for an excluded module (the probe refuses
those imports at once) or was found elsewhere than where the call found it is excluded, and with
it everything under it and everything that would import it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

__all__ = ["NEVER_IN_TEMPLATE", "Learner", "ModuleEntry", "fork_hazard", "import_into_template", "imported_since",
           "under"]

# JAX picks its devices and starts its threads when first imported: each call imports it itself.
NEVER_IN_TEMPLATE = ("jax", "jaxlib")
# A probe stuck in an import (one waiting on the network, say) is ended, and that module excluded.
_PROBE_TIMEOUT_S = 120.0

ModuleEntry = tuple[str, "str | None"]
"""A module a call imported: its name and where it was found (its spec's ``origin``)."""


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def under(name: str, roots: set[str] | Sequence[str]) -> bool:
    """True when module ``name`` is one of ``roots`` or inside one of them (``jax._src`` under ``jax``)."""
    if name in roots:
        return True
    dot = name.find(".")
    while dot != -1:
        if name[:dot] in roots:
            return True
        dot = name.find(".", dot + 1)
    return False


def fork_hazard(never_in_template: Iterable[str]) -> str | None:
    """Why this process may not be forked as a template now (None: it may).

    A second thread (forking a multi-threaded process is unsafe), or a package of
    ``never_in_template`` already imported.
    """
    threads = _thread_count()
    if threads > 1:
        return f"{threads} threads"
    for name in never_in_template:
        if name in sys.modules:
            return f"{name} imported"
    return None


def import_into_template(modules: Sequence[str], never_in_template: Sequence[str]) -> tuple[list[str], str | None]:
    """Import ``modules`` here: (names whose import failed, the name whose import made forking unsafe).

    A module under ``never_in_template`` is left alone; a failed import is left for the call's own
    process to repeat and report.
    """
    failed = []
    for name in modules:
        if name in sys.modules or under(name, never_in_template):
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - the call's own process imports it again and reports
            failed.append(name)
        if fork_hazard(never_in_template) is not None:
            return failed, name
    return failed, None


def imported_since(before: set[str], never_in_template: Sequence[str]) -> list[ModuleEntry]:
    """Modules in ``sys.modules`` that are not in ``before``, in the order they were imported.

    Only modules known by their own name (not aliases such as ``os.path``, nor ``__main__``) and
    none under ``never_in_template``.
    """
    never = set(never_in_template)
    found = []
    for name, module in list(sys.modules.items()):
        if name in before or under(name, never):
            continue
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.name == name:
            found.append((name, spec.origin))
    return found


def _parents_first(entries: Sequence[ModuleEntry]) -> list[ModuleEntry]:
    """``entries`` with each package among them moved before its first submodule.

    ``sys.modules`` lists a module when its import ends, so a package after its submodules; but
    importing a submodule imports its package first, and a package at fault must be tried alone
    (else each of its submodules is tried, and fails, in a round of its own).
    """
    origins = dict(entries)
    done: set[str] = set()
    ordered = []
    for name, _ in entries:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in origins and prefix not in done:
                done.add(prefix)
                ordered.append((prefix, origins[prefix]))
    return ordered


class _Refuser(importlib.abc.MetaPathFinder):
    """In a probe: refuses to import excluded modules, and remembers that it was asked to."""

    def __init__(self, excluded: set[str]):
        self.excluded = excluded
        self.asked: str | None = None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if under(fullname, self.excluded):
            self.asked = fullname
            raise ModuleNotFoundError(f"{fullname} is not imported into a warm template", name=fullname)
        return None


def _probe_main(write_fd: int, entries: Sequence[ModuleEntry], excluded: set[str],
                never_in_template: Sequence[str]) -> NoReturn:
    """The body of a probe: import ``entries`` one by one, one line each ("ok"/"bad" and the name);
    stop after the first bad one (what it left behind would mislead the next verdicts)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)  # the template imports it again: print once
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        refuser = _Refuser(excluded)
        sys.meta_path.insert(0, refuser)
        with os.fdopen(write_fd, "w", buffering=1) as out:
            for name, origin in entries:
                refuser.asked = None
                ok = name in sys.modules
                if not ok and not under(name, excluded):
                    try:
                        # A module of that name found elsewhere than where the call found it (a
                        # folder the call put on sys.path) is another module: not this one.
                        spec = importlib.util.find_spec(name)
                        if spec is not None and spec.origin == origin:
                            importlib.import_module(name)
                            ok = True
                    except BaseException:  # noqa: BLE001 - a probe only tells whether the import is safe
                        ok = False
                ok = ok and refuser.asked is None and fork_hazard(never_in_template) is None
                out.write(f"{'ok' if ok else 'bad'} {name}\n")
                if not ok:
                    break
    finally:
        os._exit(0)


class Learner:
    """The template's side of learning: excluded names, modules waiting to be probed, the probe."""

    def __init__(self, never_in_template: Sequence[str]):
        self.never = tuple(never_in_template)
        self.excluded: set[str] = set(never_in_template)
        self.pending: list[ModuleEntry] = []
        self.probe: _Probe | None = None

    def add(self, entries: Sequence[ModuleEntry], excluded: Iterable[str]) -> None:
        self.excluded.update(excluded)
        waiting = {name for name, _ in self.pending}
        for name, origin in entries:
            if name not in waiting and name not in sys.modules and not under(name, self.excluded):
                waiting.add(name)
                self.pending.append((name, origin))

    def start(self) -> int | None:
        """Fork a probe for the pending modules (unless one runs): the read end to watch, or None."""
        self.pending = [(n, o) for n, o in self.pending if n not in sys.modules and not under(n, self.excluded)]
        if self.probe is not None or not self.pending:
            return None
        entries, self.pending = _parents_first(self.pending), []
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _probe_main(write_end, entries, self.excluded, self.never)
        os.close(write_end)
        self.probe = _Probe(pid, read_end, entries, time.monotonic() + _PROBE_TIMEOUT_S)
        return read_end

    def discard(self) -> None:
        """Forget the probe that ended (a retiring template imports nothing more)."""
        probe, self.probe = self.probe, None
        assert probe is not None
        os.close(probe.read_end)
        os.waitpid(probe.pid, 0)

    def finish(self) -> tuple[list[str], list[str], str | None]:
        """After the probe ended (its pipe closed): import here what it imported safely.

        Returns:
            (modules imported here, modules excluded, the module whose import here made forking
            unsafe or None).
        """
        probe = self.probe
        assert probe is not None
        self.discard()
        verdicts = {}
        for line in probe.output.decode().splitlines():
            verdict, _, name = line.partition(" ")
            verdicts[name] = verdict
        imported: list[str] = []
        excluded: list[str] = []
        unsafe = None
        for i, (name, _origin) in enumerate(probe.entries):
            if verdicts.get(name) != "ok":
                # Bad, or the probe ended while importing it (it crashed, or was overdue).
                excluded.append(name)
                self.pending[:0] = probe.entries[i + 1:]
                break
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - the probe imported it; here it failed: leave it out
                excluded.append(name)
                continue
            if fork_hazard(self.never) is not None:
                excluded.append(name)
                unsafe = name
                break
            imported.append(name)
        self.excluded.update(excluded)
        return imported, excluded, unsafe


class _Probe:
    """A probe running: its pid, the read end of its verdicts, what it imports, when it is overdue."""

    def __init__(self, pid: int, read_end: int, entries: list[ModuleEntry], deadline: float):
        self.pid = pid
        self.read_end = read_end
        self.entries = entries
        self.deadline = deadline
        self.output = b""

    def read(self) -> bool:
        """Take what the probe wrote so far; True once it closed its end (it exited)."""
        chunk = os.read(self.read_end, 65536)
        self.output += chunk
        return not chunk

    def end_if(self, overdue_only: bool) -> None:
        """End the probe (if ``overdue_only``: only once it is overdue)."""
        if not overdue_only or time.monotonic() > self.deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
