"""What runs inside a step's own process: import ``fn``, rebuild the config, call it."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import logging
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from marin.execution.core.identity import fn_identity
from marin.execution.core.traits import Start, traits_of
from rigging.lease import watch_lease
from rigging.log import setup_logging
from rigging.store_requests import request_counts

__all__ = ["FnRef", "RunningStep", "StepPayload", "current_step", "import_fn", "run_step", "running"]


@dataclass(frozen=True)
class FnRef:
    """How a worker finds ``fn``: its module name and, for scripts, the file to load it from."""

    module: str
    qualname: str
    file: str | None = None

    @classmethod
    def of(cls, fn: Any) -> FnRef:
        """Where ``fn`` is found (:func:`fn_identity`), with the file of the module that defines it."""
        module, qualname = fn_identity(fn).split(":", 1)
        file = getattr(sys.modules.get(fn.__module__), "__file__", None)
        return cls(module=module, qualname=qualname, file=os.path.abspath(file) if file else None)


@dataclass(frozen=True)
class StepPayload:
    """Everything a worker needs, with the config pickled for transport only (never for hashing)."""

    step_name: str
    fn: FnRef
    config_pickle: bytes
    output_path: str
    log_path: str | None
    prefix: str = ""
    """The store's prefix: a running step is handed it (:func:`current_step`), never parses its output path."""
    expansions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    """For each input whose output decided more steps: (its output folder, the (name, output folder)
    of every step it expanded into, in plan order); see :meth:`RunningStep.expanded`."""
    start: Start | None = None
    """Where the build starts, as the plan decided (:attr:`RunningStep.start`)."""
    sys_path: tuple[str, ...] = ()
    step_version: str = "v1"
    """The step's version (its name and version are what a running ``fn`` may ask of :func:`current_step`)."""
    exit_on_preemption: bool = True
    """Leave the process with :data:`fray.types.PREEMPTED_EXIT_CODE` when ``fn`` raises
    :class:`fray.types.Preempted` (only when the step has a process of its own): the runner then
    treats it like a lost worker and retries the step if it may."""
    lease: tuple[str, int, float] | None = None
    """(folder, number, ttl) of the lease the step runs under, when it has a process of its own:
    the process watches it and ends itself once the lease is lost (:func:`rigging.lease.watch_lease`),
    so a step whose runner is frozen, or on another host, still stops by the lease's expiry."""
    opens_accelerator: bool = False
    """The step holds accelerator slots: its process opens the accelerator before ``fn`` runs
    (:func:`_open_accelerator`), so that finding it held is told apart from ``fn``'s own errors."""


@dataclass(frozen=True)
class RunningStep:
    """The step whose ``fn`` is running (see :func:`current_step`)."""

    name: str
    version: str
    output_path: str
    prefix: str
    """The store the step writes into (its earlier builds are there)."""
    expansions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    start: Start | None = None
    """Where this build starts, as the plan decided it (``marin plan`` showed the same): e.g. the
    earlier build it extends and from which checkpoint. A step acts on this and never looks for
    earlier builds itself, so the plan and the build cannot disagree."""
    _reports: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def report_incremental(self, files_reused: int, files_processed: int) -> None:
        """Say that this build reused the per-file outputs of ``files_reused`` input files of an
        earlier build (``start.reuse_parts``) and processed ``files_processed``: the build's
        provenance records it as ``incremental``. Nothing of it goes into the output folder, so
        the build stays byte-identical to one made from scratch."""
        for name, value in (("files_reused", files_reused), ("files_processed", files_processed)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"report_incremental: {name} must be an int >= 0, got {value!r}")
        self._reports["incremental"] = {"files_reused": files_reused, "files_processed": files_processed}

    def reports(self) -> dict[str, Any]:
        """What the running step reported of its build (``{"incremental": {...}}``, or ``{}``)."""
        return dict(self._reports)

    def expanded(self, input_path: str) -> list[tuple[str, str]]:
        """The steps an input (given by its output folder, as the step's config holds it) expanded
        into, as (name, output folder), in plan order; [] for an input that expands into nothing.
        They are all built before this step runs."""
        wanted = input_path.rstrip("/")
        for path, found in self.expansions:
            if path.rstrip("/") == wanted:
                return list(found)
        return []


_CURRENT: contextvars.ContextVar[RunningStep | None] = contextvars.ContextVar("marin_current_step", default=None)


def current_step() -> RunningStep | None:
    """The step being built, inside its ``fn`` (None elsewhere).

    For functions that need their step's name, version, prefix, what their inputs expanded into,
    or where the plan decided their build starts (:attr:`RunningStep.start`).
    """
    return _CURRENT.get()


@contextlib.contextmanager
def running(step: RunningStep) -> Iterator[None]:
    """Make ``step`` what :func:`current_step` returns while the block runs: the worker does this
    around ``fn``; code that calls a step function itself (a test, an embedding) does too."""
    token = _CURRENT.set(step)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _load_module(ref: FnRef):
    try:
        return importlib.import_module(ref.module)
    except ModuleNotFoundError as e:
        if not ref.file or (e.name and not ref.module.startswith(e.name)):
            raise
    # An experiment file outside any package: import it as Python imports a script, under the
    # same module name the parent used, so pickled config classes resolve.
    spec = importlib.util.spec_from_file_location(ref.module, ref.file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {ref.module} from {ref.file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[ref.module] = module
    spec.loader.exec_module(module)
    return module


def import_fn(ref: FnRef) -> Any:
    """Import and return the function ``ref`` names."""
    target: Any = _load_module(ref)
    for part in ref.qualname.split("."):
        target = getattr(target, part)
    return target


def _redirect_output(log_path: str) -> None:
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _end_this_step(why: str) -> None:
    """The lease this step runs under is lost: end this process and what it started, now (a
    holder that lost its lease must write nothing more)."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"[marin] {why}: this step's process stops\n")
        sys.stderr.flush()
    # Its own process group when it leads one (every step process with a process of its own does).
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _open_accelerator(fn: Any, config: Any) -> None:
    """Open the accelerator as ``fn``'s runtime does (its trait's opener, else JAX's backends);
    raises ``iris.accelerator_open.AcceleratorUnavailable`` when another process holds it."""
    # Not at import: only a step given the accelerator opens it.
    from iris.accelerator_open import open_accelerator, open_jax

    opener = traits_of(fn).open_accelerator
    if opener is not None:
        open_accelerator(opener, config)
    else:
        open_accelerator(open_jax)


def run_step(payload: StepPayload) -> dict[str, Any]:
    """Run one step in this (fresh) process; returns timing facts for the provenance, and what the
    step reported of its build (:meth:`RunningStep.report_incremental`)."""
    if payload.log_path:
        _redirect_output(payload.log_path)
    for entry in reversed(payload.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    setup_logging(os.environ.get("MARIN_LOG_LEVEL", "INFO"))
    log = logging.getLogger("marin.step")
    # fray's package imports Ray (~0.8 s): not for the runner that only plans.
    from fray.types import Preempted

    if payload.prefix.startswith("gs://"):
        # What the step's libraries open on gs:// themselves (Orbax's metadata) follows the store's rules.
        from rigging.gcs import use_in_fsspec  # fsspec: only for a step on an object store

        use_in_fsspec()
    # A warm accelerator process runs later steps after this one: once this step has ended, its
    # lease (released, or taken by the next run) is no reason to end the process.
    ended = threading.Event()
    if payload.lease is not None:
        folder, token, ttl = payload.lease
        watch_lease(folder, token, ttl, lambda why: None if ended.is_set() else _end_this_step(why))
    started = time.time()
    requests_before = request_counts()  # a forked worker starts from its parent's counts
    step = RunningStep(payload.step_name, payload.step_version, payload.output_path, payload.prefix,
                       payload.expansions, payload.start)
    try:  # however the step ends (the accelerator found held, too), its lease's watch stands down
        fn = import_fn(payload.fn)
        config = pickle.loads(payload.config_pickle)
        log.info("step %s starting in pid %d -> %s", payload.step_name, os.getpid(), payload.output_path)
        if payload.opens_accelerator:
            _open_accelerator(fn, config)
        with running(step):
            fn(config, payload.output_path)
    except Preempted as e:
        if not payload.exit_on_preemption:
            raise
        # A preemption is not a bug in fn: say so by how the process ends, as a lost host would.
        log.warning("step %s preempted: %s", payload.step_name, e)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.exit_code)
    finally:
        ended.set()
    log.info("step %s finished in %.2fs", payload.step_name, time.time() - started)
    sys.stdout.flush()
    sys.stderr.flush()
    counted = request_counts(since=requests_before)
    return {"started_at": started, "finished_at": time.time(), "pid": os.getpid(), **step.reports(),
            **({"store_requests": counted} if counted.get("requests") else {})}
