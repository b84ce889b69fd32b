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
from marin.execution.plan import Action, Plan, PlannedStep, make_plan
from marin.execution.step import OutputPath, Step
from marin.execution.store import META_DIR, StepRecord, StepStore, compute_manifest
from marin.execution.worker import FnRef, StepPayload, run_step
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost, clear_leases, default_holder

__all__ = ["Outcome", "Reporter", "RunResult", "StepOutcome", "StepRunner"]

logger = logging.getLogger(__name__)


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
                         explain=explain, env_digest=env_digest if note_env else None)

    # -- running ----------------------------------------------------------------------------
    def run(self, steps: Iterable[Step | Lazy]) -> RunResult:
        """Build every step of the graph that is not already built; see :class:`RunResult`."""
        steps = list(steps)
        plan = self.plan(steps, explain=True)
        self.reporter.planned(plan)
        outcomes: dict[int, StepOutcome] = {}
        for pos, p in enumerate(plan.steps):
            if p.action is Action.CACHED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.CACHED, note=p.env_note)
            elif p.action is Action.UNNEEDED:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.UNNEEDED)
            elif self.dry_run:
                outcomes[pos] = StepOutcome(p.name, p.hash, p.output_path, Outcome.WOULD_RUN,
                                            reasons=[str(r) for r in p.reasons])
        if not self.dry_run and plan.to_run():
            self._execute(plan, outcomes)
        result = RunResult([outcomes[i] for i in range(len(plan.steps))], self.store.prefix, plan)
        return result

    def _client_or_default(self) -> Any:
        if self._client is None:
            from fray.cluster import LocalClient

            self._client = LocalClient()
        return self._client

    def _execute(self, plan: Plan, outcomes: dict[int, StepOutcome]) -> None:
        pending = [pos for pos, p in enumerate(plan.steps) if p.action is Action.RUN]
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
                    if not all(o is not None and o.outcome in (Outcome.CACHED, Outcome.RAN) for o in dep_outcomes):
                        continue
                    if len(running) >= self.max_parallel:
                        break
                    started = self._try_start(plan, pos, paths, outcomes, waiting_on)
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
                   waiting_on: dict[int, str]) -> _Running | None:
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
