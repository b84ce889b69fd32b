"""The Make-style runner: build what is missing, reuse what is built, each distinct hash once."""

from __future__ import annotations

import enum
import logging
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from marin.execution.hashing import (
    UnserializableConfig,
    config_to_json,
    flatten_config,
    fn_identity,
    workspace_root,
)
from marin.execution.lazy import Lazy
from marin.execution.plan import Action, Plan, PlannedStep, Reason, ReasonKind, make_plan
from marin.execution.step import OutputPath, Step
from marin.execution.store import META_DIR, StepRecord, StepStore, compute_manifest
from marin.execution.worker import FnRef, StepPayload, run_step
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost, clear_leases, default_holder

__all__ = ["NotCached", "Outcome", "Reporter", "RunResult", "StepOutcome", "StepRunner"]

logger = logging.getLogger(__name__)


class NotCached(RuntimeError):
    """``require_cached`` was set and some steps would have to be built; ``steps`` names them."""

    def __init__(self, steps: list[str]):
        shown = ", ".join(steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
        super().__init__(f"{len(steps)} step(s) would have to be built: {shown}")
        self.steps = steps


class Outcome(enum.Enum):
    CACHED = "cached"
    RAN = "ran"
    FAILED = "failed"
    UPSTREAM_FAILED = "not run: upstream failed"
    WOULD_RUN = "would run"
    UNNEEDED = "unneeded"
    INTERRUPTED = "interrupted"


@dataclass
class StepOutcome:
    """What happened to one step in a run."""

    name: str
    hash: str
    output_path: str
    outcome: Outcome
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    traceback: str | None = None
    log_path: str | None = None
    duration: float | None = None
    note: str | None = None


@dataclass
class RunResult:
    """Every step of the run with its outcome, dependencies first."""

    steps: list[StepOutcome]
    prefix: str
    plan: Plan | None = None

    @property
    def ok(self) -> bool:
        return not any(s.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED, Outcome.INTERRUPTED) for s in self.steps)

    @property
    def failed(self) -> list[StepOutcome]:
        return [s for s in self.steps if s.outcome is Outcome.FAILED]

    def by_name(self, name: str) -> StepOutcome:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for s in self.steps if s.outcome is outcome)


class Reporter(Protocol):
    """Receives the runner's progress; the CLI draws it."""

    def planned(self, plan: Plan) -> None: ...
    def started(self, planned: PlannedStep) -> None: ...
    def waiting(self, planned: PlannedStep, holder: str) -> None: ...
    def finished(self, outcome: StepOutcome) -> None: ...
    def tick(self, running: Sequence[PlannedStep]) -> None: ...


class _QuietReporter:
    def planned(self, plan: Plan) -> None:
        pass

    def started(self, planned: PlannedStep) -> None:
        logger.info("running %s", planned.output_name)

    def waiting(self, planned: PlannedStep, holder: str) -> None:
        logger.info("waiting for %s (held by %s)", planned.output_name, holder)

    def finished(self, outcome: StepOutcome) -> None:
        logger.info("%s %s", outcome.outcome.value, outcome.name)

    def tick(self, running: Sequence[PlannedStep]) -> None:
        pass


def _fn_ref(fn: Any) -> FnRef:
    module, qualname = fn_identity(fn).split(":", 1)
    source = sys.modules.get(fn.__module__)
    file = getattr(source, "__file__", None)
    return FnRef(module=module, qualname=qualname, file=os.path.abspath(file) if file else None)


def _resolve(value: Any, paths: dict[int, str]) -> Any:
    """The config with every placeholder replaced by its real path (dataclasses rebuilt)."""
    import dataclasses

    if isinstance(value, OutputPath):
        step = value.step.lower() if isinstance(value.step, Lazy) else value.step
        base = paths[id(step)]
        return fs.join(base, value.sub_path) if value.sub_path else base
    if isinstance(value, Lazy):
        return paths[id(value.lower())]
    if isinstance(value, Step):
        return paths[id(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _resolve(old, paths)
            if new is not old:
                changes[f.name] = new
        if not changes:
            return value
        init_changes = {k: v for k, v in changes.items() if next(f for f in dataclasses.fields(value) if f.name == k).init}
        out = dataclasses.replace(value, **init_changes)
        for k, v in changes.items():
            if k not in init_changes:
                object.__setattr__(out, k, v)
        return out
    if isinstance(value, dict):
        new = {k: _resolve(v, paths) for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    if isinstance(value, list | tuple):
        items = [_resolve(v, paths) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return value


@dataclass
class _Running:
    planned: PlannedStep
    lease: Lease
    handle: Any
    started: float
    attempt: int
    local_log: str
    remote_log: str | None


class StepRunner:
    """Evaluates a graph of steps Make-style.

    Args:
        prefix: where outputs live; default from the configuration (``rigging``).
        max_parallel: how many steps may run at once; default from the configuration, else one
            per CPU.
        force: glob patterns of step names to rebuild even when cached.
        dry_run: plan only; run nothing.
        only: glob patterns: build only matching steps and their dependencies.
        lease_ttl: seconds a lease lives without a heartbeat before another runner may take over.
        strict_env: make the environment fingerprint part of every hash.
        reporter: receives progress (the CLI's display); default: log lines.
        client: the ``fray`` client that runs each step in its own process.
        poll_interval: seconds between checks of running and awaited steps.
        caches: read-only caches (other prefixes) to fetch finished steps from before building;
            default from the configuration.
        require_cached: refuse to build anything (raise :class:`NotCached` naming the steps).
    """

    def __init__(
        self,
        prefix: str | None = None,
        max_parallel: int | None = None,
        force: Sequence[str] = (),
        dry_run: bool = False,
        *,
        only: Sequence[str] = (),
        lease_ttl: float = 60.0,
        strict_env: bool | None = None,
        reporter: Reporter | None = None,
        client: Any = None,
        poll_interval: float = 0.1,
        config: Any = None,
        caches: Sequence[str] | None = None,
        require_cached: bool = False,
    ):
        if config is None and (prefix is None or max_parallel is None or strict_env is None):
            from rigging.config.discovery import discover_config

            config = discover_config()
        self.prefix = prefix or config.resolved_prefix()
        self.max_parallel = max_parallel or (config.max_parallel if config else None) or (os.cpu_count() or 1)
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel}")
        self.force = tuple(force)
        self.only = tuple(only)
        self.dry_run = dry_run
        self.lease_ttl = lease_ttl
        self.strict_env = bool(config.strict_env if strict_env is None and config else strict_env)
        self.reporter: Reporter = reporter or _QuietReporter()
        self._client = client
        self.poll_interval = poll_interval
        self.store = StepStore(self.prefix)
        self.holder = default_holder()
        self.caches = tuple(caches if caches is not None else (config.caches if config else ()))
        self.require_cached = require_cached

    # -- planning ---------------------------------------------------------------------------
    def _env(self) -> tuple[dict[str, Any], str]:
        from marin.execution.environment import environment_fingerprint, fingerprint_digest

        fingerprint = environment_fingerprint(workspace_root())
        return fingerprint, fingerprint_digest(fingerprint)

    def plan(self, steps: Iterable[Step | Lazy], *, explain: bool = True, note_env: bool = False) -> Plan:
        """The plan for ``steps``: cached, or the reason each would run.

        Args:
            explain: give the reasons of the steps that would run.
            note_env: also say which cached steps were built in another environment (reads every
                cached step's provenance: for ``marin plan``, not for the no-op path of a run).
        """
        salt = env_digest = None
        if self.strict_env:
            _, salt = self._env()
            env_digest = salt
        elif note_env:
            _, env_digest = self._env()
        return make_plan(steps, self.store, force=self.force, only=self.only, salt=salt,
                         explain=explain, env_digest=env_digest if note_env else None, caches=self.caches)

    # -- running ----------------------------------------------------------------------------
    def run(self, steps: Iterable[Step | Lazy]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`."""
        steps = list(steps)
        plan = self.plan(steps, explain=True)
        if self.require_cached and plan.to_run():
            raise NotCached([p.output_name for p in plan.to_run()])
        self.reporter.planned(plan)
        outcomes: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.UNNEEDED)
            elif self.dry_run and p.action is Action.FETCH:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.WOULD_RUN,
                                            reasons=[str(r) for r in p.reasons], note="would fetch from cache")
            elif self.dry_run:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.WOULD_RUN,
                                            reasons=[str(r) for r in p.reasons])
        if not self.dry_run and plan.to_do():
            self._execute(plan, outcomes)
        result = RunResult([outcomes[i] for i in range(len(plan.steps))], self.store.prefix, plan)
        return result

    def _client_or_default(self) -> Any:
        if self._client is None:
            if fs.protocol_of(self.prefix) == "memory":
                # memory:// exists only inside this process: a step run in a process of its own
                # would write into a store nobody else sees, and its empty output would be
                # published as done. So memory:// steps run here.
                self._client = _InProcessClient()
            else:
                from fray.cluster import LocalClient

                self._client = LocalClient()
        return self._client

    def _execute(self, plan: Plan, outcomes: dict[int, StepOutcome]) -> None:
        pending = [pos for pos, p in enumerate(plan.steps) if p.action in (Action.RUN, Action.FETCH)]
        running: dict[int, _Running] = {}
        waiting_on: dict[int, str] = {}
        paths = plan.paths()
        try:
            while pending or running:
                progressed = False
                for pos in list(pending):
                    p = plan.steps[pos]
                    dep_outcomes = [outcomes.get(d) for d in p.deps]
                    if any(o is not None and o.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED) for o in dep_outcomes):
                        failed = [plan.steps[d].name for d, o in zip(p.deps, dep_outcomes, strict=True)
                                  if o is not None and o.outcome in (Outcome.FAILED, Outcome.UPSTREAM_FAILED)]
                        outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.UPSTREAM_FAILED,
                                                    reasons=[str(r) for r in p.reasons],
                                                    error=f"upstream failed: {', '.join(failed)}")
                        self.reporter.finished(outcomes[pos])
                        pending.remove(pos)
                        progressed = True
                        continue
                    # A fetch copies a finished output whole: it waits for no inputs.
                    if p.action is not Action.FETCH and not all(
                        o is not None and o.outcome in (Outcome.CACHED, Outcome.RAN) for o in dep_outcomes
                    ):
                        continue
                    if len(running) >= self.max_parallel:
                        break
                    before = len(pending)
                    started = self._try_start(plan, pos, paths, outcomes, waiting_on, pending)
                    if len(pending) != before:
                        progressed = True  # a refused cache entry brought its inputs into the run
                    if started is not None:
                        running[pos] = started
                        pending.remove(pos)
                        progressed = True
                    elif pos in outcomes:
                        pending.remove(pos)
                        progressed = True
                for pos in list(running):
                    r = running[pos]
                    if r.handle.done() or r.lease.lost:
                        outcome = self._finish(plan, pos, r)
                        del running[pos]
                        progressed = True
                        if outcome is None:
                            pending.append(pos)  # lost the lease: wait for whoever holds it now
                        else:
                            outcomes[pos] = outcome
                            self.reporter.finished(outcome)
                if not progressed and not running and not waiting_on and pending:
                    stuck = ", ".join(plan.steps[pos].name for pos in pending[:5])
                    raise RuntimeError(f"scheduler stalled with no step runnable: {stuck}")
                if not progressed:
                    self.reporter.tick([r.planned for r in running.values()])
                    time.sleep(self.poll_interval)
        except BaseException:
            for pos, r in running.items():
                r.handle.cancel()
                self._record_status(r.planned, "interrupted", r.attempt, error="interrupted by the runner")
                r.lease.release()
                outcomes[pos] = StepOutcome(r.planned.name, r.planned.hash, r.planned.output_path,
                                            Outcome.INTERRUPTED, error="interrupted")
            for pos in pending:
                p = plan.steps[pos]
                outcomes.setdefault(pos, StepOutcome(p.name, p.hash, p.output_path, Outcome.INTERRUPTED))
            raise

    def _try_start(self, plan: Plan, pos: int, paths: dict[int, str], outcomes: dict[int, StepOutcome],
                   waiting_on: dict[int, str], pending: list[int]) -> _Running | None:
        p = plan.steps[pos]
        record = StepRecord(p.output_path)
        forced = any(r.kind.name == "FORCED" for r in p.reasons)
        if not forced and record.is_done():
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED,
                                        note="built by another runner" if pos in waiting_on else None)
            self.reporter.finished(outcomes[pos])
            return None
        lease = Lease.acquire(record.meta, ttl=self.lease_ttl, holder=self.holder)
        if lease is None:
            from rigging.lease import current_lease

            info = current_lease(record.meta)
            holder = info.holder if info else "?"
            if waiting_on.get(pos) != holder:
                waiting_on[pos] = holder
                self.reporter.waiting(p, holder)
            return None
        # Somebody may have published between our check and our lease.
        if not forced and record.is_done():
            lease.release()
            clear_leases(record.meta)
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED, note="built by another runner")
            self.reporter.finished(outcomes[pos])
            return None
        if p.action is Action.FETCH:
            if self._fetch(p, lease):
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED,
                                            note=f"fetched from {p.cache_hit.cache}")
                self.reporter.finished(outcomes[pos])
                return None
            # The cache entry was refused: build it here, its inputs first.
            p.action = Action.RUN
            p.reasons = [Reason(ReasonKind.NEW, "cache entry refused; rebuilding")]
            if self._activate_inputs(plan, pos, outcomes, pending):
                lease.release()
                return None
        lease.start_heartbeat()
        try:
            if forced and pos not in waiting_on:
                _wipe_output(p.output_path)
            status = record.read_json(record.status) or {}
            attempt = int(status.get("attempt", 0)) + 1
            self._record_status(p, "running", attempt)
            config = _resolve(p.step.config, paths)
            try:
                config_bytes = pickle.dumps(config)
            except Exception as e:  # noqa: BLE001 - reported as the step's failure
                raise UnserializableConfig(f"{p.name}: config cannot be sent to a worker: {e}") from e
            local_log, remote_log = self._log_paths(p)
            root = workspace_root()
            payload = StepPayload(
                step_name=p.name,
                fn=_fn_ref(p.step.fn),
                config_pickle=config_bytes,
                output_path=p.output_path,
                log_path=local_log,
                sys_path=tuple(x for x in (root, *sys.path[:1]) if x),
            )
            if fs.is_local(p.output_path):
                os.makedirs(fs.strip_protocol(p.output_path), exist_ok=True)
            handle = self._client_or_default().submit(run_step, payload, name=p.output_name,
                                                      env={"MARIN_LOG_LEVEL": logging.getLevelName(logging.getLogger().level)})
        except Exception as e:  # noqa: BLE001 - a step that cannot start is that step's failure
            self._record_status(p, "failed", 0, error=f"{type(e).__name__}: {e}", tb=traceback.format_exc())
            lease.release()
            outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.FAILED,
                                        reasons=[str(r) for r in p.reasons], error=f"{type(e).__name__}: {e}",
                                        traceback=traceback.format_exc())
            self.reporter.finished(outcomes[pos])
            return None
        self.reporter.started(p)
        return _Running(p, lease, handle, time.time(), attempt, local_log, remote_log)

    def _fetch(self, p: PlannedStep, lease: Lease) -> bool:
        """Copy ``p`` from its cache and publish it; False (with a warning) if the entry is bad."""
        from marin.execution.cache import CacheMiss, substitute

        record = StepRecord(p.output_path)
        try:
            substitute(p.cache_hit, p.output_path)
            lease.check()
            manifest = record.read_json(record.manifest) or compute_manifest(p.output_path)
            fs.create_if_absent(record.success, _success_body(p, manifest))
        except CacheMiss as e:
            logger.warning("%s; rebuilding %s", e, p.output_name)
            return False
        except LeaseLost as e:
            logger.warning("%s: %s", p.output_name, e)
            return False
        lease.release()
        clear_leases(record.meta)
        return True

    def _activate_inputs(self, plan: Plan, pos: int, outcomes: dict[int, StepOutcome], pending: list[int]) -> bool:
        """Bring the inputs of a step that must now be built into the run; True if any were added."""
        added = False
        stack = [d for d in plan.steps[pos].deps]
        while stack:
            d = stack.pop()
            o = outcomes.get(d)
            if o is None or o.outcome is not Outcome.UNNEEDED:
                continue
            q = plan.steps[d]
            del outcomes[d]
            if StepRecord(q.output_path).is_done():
                outcomes[d] = StepOutcome(q.name, q.hash, q.output_path, Outcome.CACHED)
                continue
            from marin.execution.cache import find_in_caches

            q.cache_hit = find_in_caches(q.output_name, self.caches) if self.caches else None
            q.action = Action.FETCH if q.cache_hit is not None else Action.RUN
            q.reasons = [Reason(ReasonKind.UPSTREAM_CHANGED, f"needed to rebuild {plan.steps[pos].name}")]
            pending.append(d)
            added = True
            if q.action is Action.RUN:
                stack.extend(q.deps)
        return added

    def _log_paths(self, p: PlannedStep) -> tuple[str, str | None]:
        record = StepRecord(p.output_path)
        if fs.is_local(p.output_path):
            return fs.strip_protocol(record.log), None
        folder = tempfile.mkdtemp(prefix="marin-log-")
        return os.path.join(folder, "log.txt"), record.log

    def _record_status(self, p: PlannedStep, state: str, attempt: int, *, error: str | None = None,
                       tb: str | None = None) -> None:
        record = StepRecord(p.output_path)
        data: dict[str, Any] = {"state": state, "attempt": attempt, "holder": self.holder, "time": time.time()}
        if error:
            data["error"] = error
        if tb:
            data["traceback"] = tb
        record.write_json(record.status, data)

    def _finish(self, plan: Plan, pos: int, r: _Running) -> StepOutcome | None:
        p = r.planned
        record = StepRecord(p.output_path)
        duration = time.time() - r.started
        reasons = [str(x) for x in p.reasons]
        try:
            timing = r.handle.result(timeout=0) if not r.lease.lost else None
            if r.lease.lost:
                raise LeaseLost(r.lease.lost)
        except LeaseLost as e:
            r.handle.cancel()
            logger.warning("%s: %s; waiting for the new holder", p.output_name, e)
            return None
        except BaseException as e:  # noqa: BLE001 - a step's failure is data, not a crash of the runner
            from fray.cluster import JobFailed

            tb = getattr(e, "remote_traceback", None) or traceback.format_exc()
            message = str(e)
            if isinstance(e, JobFailed) and message.startswith(f"job {p.output_name} failed: "):
                message = message[len(f"job {p.output_name} failed: "):]
            self._upload_log(r)
            try:
                self._record_status(p, "failed", r.attempt, error=message, tb=tb)
            finally:
                r.lease.release()
            return StepOutcome(p.name, p.hash, p.output_path, Outcome.FAILED, reasons=reasons, error=message,
                               traceback=tb, log_path=r.remote_log or r.local_log, duration=duration)
        try:
            self._upload_log(r)
            r.lease.check()
            manifest = compute_manifest(p.output_path)
            record.write_json(record.manifest, manifest)
            record.write_json(record.provenance, self._provenance(plan, p, r, timing, manifest))
            r.lease.check()  # fencing: a runner that lost its lease never publishes
            fs.create_if_absent(record.success, _success_body(p, manifest))
        except LeaseLost as e:
            logger.warning("%s: %s; not publishing", p.output_name, e)
            r.lease.stop_heartbeat()
            return None
        r.lease.stop_heartbeat()
        clear_leases(record.meta)
        return StepOutcome(p.name, p.hash, p.output_path, Outcome.RAN, reasons=reasons,
                           log_path=r.remote_log or r.local_log, duration=duration)

    def _upload_log(self, r: _Running) -> None:
        if r.remote_log and os.path.exists(r.local_log):
            with open(r.local_log, "rb") as f:
                fs.atomic_write(r.remote_log, f.read())
            shutil.rmtree(os.path.dirname(r.local_log), ignore_errors=True)
            r.local_log = r.remote_log

    def _provenance(self, plan: Plan, p: PlannedStep, r: _Running, timing: Any, manifest: dict) -> dict[str, Any]:
        fingerprint, digest = self._env()
        paths = plan.paths()
        hashes = plan.hashes()
        return {
            "name": p.name,
            "hash": p.hash,
            "version": p.step.version,
            "fn": fn_identity(p.step.fn),
            "config": config_to_json(p.step.config, paths),
            "config_flat": flatten_config(p.step.config, hashes),
            "dependencies": [{"name": plan.steps[d].name, "hash": plan.steps[d].hash,
                              "path": plan.steps[d].output_path} for d in p.deps],
            "environment": fingerprint,
            "env_digest": digest,
            "strict_env": self.strict_env,
            "host": fingerprint.get("host"),
            "runner": self.holder,
            "started_at": r.started,
            "finished_at": time.time(),
            "duration_s": time.time() - r.started,
            "attempts": r.attempt,
            "reasons": [x.to_json() for x in p.reasons],
            "worker": timing,
            "output_bytes": manifest["total_bytes"],
            "output_files": len(manifest["files"]),
        }


class _DoneJob:
    """The handle of a call that already ran (see :class:`_InProcessClient`)."""

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self._value = value
        self._error = error

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        pass


class _InProcessClient:
    """Runs each step at once in the runner's own process (for ``memory://`` prefixes only).

    The step's Python-level output goes to its log; the process's own descriptors are left alone.
    """

    def submit(self, fn: Any, payload: StepPayload, *, name: str | None = None, env: Any = None,
               **kwargs: Any) -> _DoneJob:
        import contextlib
        import dataclasses

        log_path = payload.log_path
        inner = dataclasses.replace(payload, log_path=None)
        try:
            with contextlib.ExitStack() as stack:
                if log_path:
                    os.makedirs(os.path.dirname(log_path), exist_ok=True)
                    log = stack.enter_context(open(log_path, "a", encoding="utf-8"))
                    stack.enter_context(contextlib.redirect_stdout(log))
                    stack.enter_context(contextlib.redirect_stderr(log))
                try:
                    return _DoneJob(fn(inner, **kwargs))
                except Exception as e:  # noqa: BLE001 - the step's failure, reported through its handle
                    traceback.print_exc()
                    e.remote_traceback = traceback.format_exc()  # type: ignore[attr-defined]
                    return _DoneJob(error=e)
        except OSError as e:
            return _DoneJob(error=e)


def _success_body(p: PlannedStep, manifest: dict) -> str:
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()
    return json.dumps({"hash": p.hash, "name": p.name, "finished_at": time.time(), "manifest_sha256": digest})


def _wipe_output(output_path: str) -> None:
    """Remove a step's previous output (for --force), keeping its lease files."""
    for name in fs.listdir(output_path):
        if name == META_DIR:
            for meta in fs.listdir(fs.join(output_path, META_DIR)):
                if not meta.startswith("lease-"):
                    fs.rm_tree(fs.join(output_path, META_DIR, meta))
        else:
            fs.rm_tree(fs.join(output_path, name))
