"""One attempt at building one step: start its process, poll it, retry it, finish or cancel it.

The attempt owns what belongs to it alone: its lease (held while it runs), its log (written by
the worker here, or copied from the job's handle when the worker is elsewhere), its status
record, and at the end its manifest, provenance and success record.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marin.execution.core.encoding import config_to_json, flatten_config
from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.identity import fn_identity, workspace_root
from marin.execution.core.walk import with_real_paths
from marin.execution.plan.model import PlannedStep
from marin.execution.run.attempt_context import (
    AttemptContext,
    NothingHeld,
    Releasable,
    WorkerKind,
    is_lost_process,
    resources_of,
    warm_worker_can_run,
)
from marin.execution.run.outcome import Outcome, StepOutcome
from marin.execution.run.publish import nondeterminism_of, realisation_fields, record_listed
from marin.execution.run.secrets import SecretMask
from marin.execution.run.state import RunState
from marin.execution.run.worker import FnRef, StepPayload, run_step
from marin.execution.store import done_index
from marin.execution.store.cache import copy_tree
from marin.execution.store.environment import host_of
from marin.execution.store.manifest import (
    clear_output,
    compute_manifest,
    meta_names,
    remove_orphan_temporaries,
)
from marin.execution.store.records import (
    LOST_PREFIX,
    BuildState,
    Dependency,
    Provenance,
    StepRecord,
    StepStatus,
    SuccessRecord,
    files_folder,
)
from marin.execution.store.store import in_parallel
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost

if TYPE_CHECKING:
    from fray.types import JobHandle
    from iris.cluster import ResourceConfig

__all__ = ["StepAttempt"]

logger = logging.getLogger("marin.execution.step_runner")

_LOG_PULL_INTERVAL_S = 1.0


def _fn_ref(fn: Any) -> FnRef:
    module, qualname = fn_identity(fn).split(":", 1)
    source = sys.modules.get(fn.__module__)
    file = getattr(source, "__file__", None)
    return FnRef(module=module, qualname=qualname, file=os.path.abspath(file) if file else None)


@dataclass
class StepAttempt:
    """A step running under this runner's lease, from start to its outcome."""

    planned: PlannedStep
    lease: Lease
    ctx: AttemptContext
    handle: JobHandle = field(init=False)  # set by start()
    attempt: int = 1
    started: float = field(default_factory=time.time)
    local_log: str = ""
    remote_log: str | None = None
    admission: Releasable = field(default_factory=NothingHeld)  # room on this machine while it runs
    resubmit: Callable[[], Any] | None = None
    retries_left: int = 0
    retries: int = 0  # retries so far in this run
    mask: SecretMask = field(default_factory=SecretMask)
    log_offsets: dict[int, int] = field(default_factory=dict)
    logs_polled: float = 0.0
    replaced: tuple[SuccessRecord, dict[str, Any]] | None = None
    """A forced rebuild: the success record and manifest of the build it replaces."""
    lost_at: float | None = None
    """When the heartbeat found the lease lost (and stopped the step)."""
    attempt_folder: str = ""
    """Where this attempt writes the step's files, relative to its folder: "" for the folder
    itself, or its own attempt folder (:meth:`StepRecord.attempt_folder`) when an earlier holder's
    process may still be writing (:meth:`_choose_folder`)."""

    @property
    def files_folder(self) -> str:
        """The folder this attempt's step writes its files in (its ``output_path``)."""
        return files_folder(self.planned.output_path, self.attempt_folder)

    # -- start ----------------------------------------------------------------------------
    @classmethod
    def start(cls, p: PlannedStep, lease: Lease, ctx: AttemptContext, paths: Mapping[int, str], *,
              clear: bool, expansions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
              ) -> StepAttempt | StepOutcome:
        """Start ``p`` under ``lease`` (already taken); a step that cannot start is a failed outcome.

        Args:
            clear: empty the output folder first (a forced rebuild).
            expansions: what its expanding inputs expanded into (:attr:`StepPayload.expansions`).
        """
        from rigging.process import process_identity  # psutil: only when building

        record = StepRecord(p.output_path)
        self = cls(p, lease, ctx, mask=SecretMask.of(p.step.config))
        lease.start_heartbeat()
        try:
            if clear:
                done_index.unmark(ctx.prefix, [p.output_name])  # first: a marker never outlives its output
                clear_output(p.output_path)
            # The lease's listing of .marin/ says whether an earlier attempt left a status record.
            earlier = record.read_status() if record_listed(record.status, lease) else StepStatus(BuildState.MISSING)
            self._choose_folder(earlier)
            self.attempt = earlier.attempt + 1
            config = with_real_paths(p.step.config, paths)
            try:
                config_bytes = pickle.dumps(config)
            except Exception as e:  # noqa: BLE001 - reported as the step's failure
                raise UnserializableConfig(f"{p.name}: config cannot be sent to a worker: {e}") from e
            self.local_log, self.remote_log = self._log_paths()
            root = workspace_root()
            payload = StepPayload(
                step_name=p.name,
                step_version=p.step.version,
                fn=_fn_ref(p.step.fn),
                config_pickle=config_bytes,
                output_path=self.files_folder,
                prefix=ctx.prefix,
                expansions=expansions,
                start=p.start,
                log_path=self.local_log if ctx.worker is WorkerKind.LOCAL_PROCESS else None,
                sys_path=tuple(x for x in (root, *sys.path[:1]) if x),
                exit_on_preemption=ctx.worker is not WorkerKind.IN_PROCESS,
                lease=(lease.folder, lease.token, lease.ttl) if ctx.worker is not WorkerKind.IN_PROCESS else None,
            )
            if fs.is_local(self.files_folder):
                os.makedirs(fs.strip_protocol(self.files_folder), exist_ok=True)
            resources = resources_of(p.step)
            self.retries_left = resources.max_retries
            self.resubmit = self._submitter(payload, resources)
            self.handle = self.resubmit()
            lease.on_lost = self._stop_lost
            # One status record per start, written once the process exists so that it can name it.
            worker_pid = getattr(self.handle, "pid", None)
            local = isinstance(worker_pid, int) and ctx.worker is WorkerKind.LOCAL_PROCESS
            self._record(BuildState.RUNNING, worker=process_identity(worker_pid) if local and worker_pid else None)
        except Exception as e:  # noqa: BLE001 - a step that cannot start is that step's failure
            error, tb = self.mask(f"{type(e).__name__}: {e}"), self.mask(traceback.format_exc())
            record.write_status(BuildState.FAILED, 0, ctx.holder, error=error, traceback=tb, attempt_folder=self.attempt_folder)
            lease.release()
            return StepOutcome.of(p, Outcome.FAILED, reasons=[str(r) for r in p.reasons], error=error, traceback=tb)
        return self

    def _choose_folder(self, earlier: StepStatus) -> None:
        """Decide where this attempt writes (:attr:`attempt_folder`), ending what an earlier attempt left.

        An earlier attempt whose process is known to have ended (its runner recorded how it
        ended, or its process was on this host and is gone or killed now) leaves its folder to
        this one, which resumes from what it wrote there. One whose process may still run (on
        another host, a Ray task, a multi-host step: frozen with its machine, it may write again
        the moment it is revived) keeps its folder: this attempt writes in a folder of its own,
        seeded with a copy of the earlier one's files (checkpoints, committed shards) to resume
        from, and the records name it. Nothing the earlier process writes later can then touch
        what this attempt publishes.
        """
        # psutil: only when building.
        from rigging.process import end_orphaned_process

        if earlier.record is None:
            return
        p = self.planned
        ended = True
        if earlier.written is BuildState.RUNNING:
            # Its runner is gone, but its process may not have noticed yet: two writers must
            # never share a folder.
            worker = earlier.record.worker
            ended = worker is not None and end_orphaned_process(worker)
        before = earlier.record.attempt_folder
        if ended:
            self.attempt_folder = before
        else:
            self.attempt_folder = StepRecord(p.output_path).attempt_folder(self.lease.token)
            logger.warning("%s: the earlier attempt's process may still run elsewhere; this attempt "
                           "writes in %s, starting from a copy of %s", p.output_name, self.attempt_folder, before or "its folder")
            copy_tree(files_folder(p.output_path, before), self.files_folder, records=False)
        # A killed attempt may have left a half-written temporary; the new one starts clean.
        remove_orphan_temporaries(self.files_folder)

    def _submitter(self, payload: StepPayload, resources: ResourceConfig) -> Callable[[], JobHandle]:
        """A function that starts the step (again, for a retry) and returns its handle."""
        p, client = self.planned, self.ctx.client
        env = {"MARIN_LOG_LEVEL": logging.getLevelName(logging.getLogger().level)}
        if resources.num_hosts > 1:
            # iris's package imports fray's clients and with them Ray (~0.8 s): only for multi-host steps.
            from iris.multihost import MultihostJobHandle, launch

            return lambda: MultihostJobHandle(launch(client, run_step, payload, resources=resources,
                                                     name=p.output_name, env=env))
        if self.ctx.worker is WorkerKind.LOCAL_PROCESS and self.ctx.pool is not None and warm_worker_can_run(resources):
            pool = self.ctx.pool()
            return lambda: pool.submit(run_step, payload, name=p.output_name, env=env, preload=(payload.fn.module,))
        # Ray never retries on its own: the runner does, so that it counts and records attempts.
        remote = self.ctx.worker is WorkerKind.REMOTE
        extra = {} if not remote else {"resources": {**resources.to_ray_options(), "max_retries": 0}}
        return lambda: client.submit(run_step, payload, name=p.output_name, env=env, **extra)

    def _log_paths(self) -> tuple[str, str | None]:
        record = StepRecord(self.planned.output_path)
        if fs.is_local(self.planned.output_path):
            return fs.strip_protocol(record.log), None
        folder = tempfile.mkdtemp(prefix="marin-log-")
        return os.path.join(folder, "log.txt"), record.log

    def _record(self, state: BuildState, *, error: str | None = None, tb: str | None = None,
                worker: str | None = None) -> None:
        StepRecord(self.planned.output_path).write_status(state, self.attempt, self.ctx.holder, error=error,
                                                          traceback=tb, worker=worker, attempt_folder=self.attempt_folder)

    # -- while it runs -------------------------------------------------------------------
    def _stop_lost(self, why: str) -> None:
        """The heartbeat found the lease lost: the step stops now, killed, writing nothing more
        (a holder whose lease was taken over must not touch the step's output)."""
        self.lost_at = time.time()
        self.handle.cancel(grace_s=0)

    def done(self) -> bool:
        """True once the job ended or the lease was lost (either way: retry or finish it now)."""
        return self.handle.done() or bool(self.lease.lost)

    def poll(self) -> None:
        """Copy what a worker elsewhere printed since the last poll into the log (at most once a second)."""
        if self.ctx.worker is not WorkerKind.LOCAL_PROCESS:
            self._pull_logs()

    def _append_log(self, text: str) -> None:
        os.makedirs(os.path.dirname(self.local_log), exist_ok=True)
        with open(self.local_log, "a", encoding="utf-8") as f:
            f.write(self.mask(text))

    def _pull_logs(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.logs_polled < _LOG_PULL_INTERVAL_S:
            return
        self.logs_polled = now
        chunks = []
        for i, h in enumerate(getattr(self.handle, "handles", None) or [self.handle]):
            text = h.logs()
            sent = self.log_offsets.get(i, 0)
            if len(text) > sent:
                chunks.append(text[sent:])
                self.log_offsets[i] = len(text)
        if chunks:
            self._append_log("".join(chunks))

    def retry(self) -> bool:
        """Start the step again if its process died (rather than raising) and it has retries left."""
        if self.lease.lost or self.retries_left <= 0 or self.resubmit is None:
            return False
        try:
            self.handle.result(timeout=0)
            return False
        except BaseException as e:  # noqa: BLE001 - only inspected here; finish reports it
            if not is_lost_process(e):
                return False
            error = self.mask(str(e))
        if self._lease_lost_now() is not None:
            return False  # ended by the lease's new holder: never started again under a lost lease
        if self.ctx.worker is not WorkerKind.LOCAL_PROCESS:
            self._pull_logs(final=True)
        p = self.planned
        self.retries_left -= 1
        self.retries += 1
        self.attempt += 1
        logger.warning("%s: %s; retrying (attempt %d)", p.output_name, error, self.attempt)
        self._append_log(f"\n[marin] attempt {self.attempt - 1} of {p.name} lost its process ({error}); "
                         f"starting attempt {self.attempt}\n")
        self._record(BuildState.RUNNING, error=f"attempt {self.attempt - 1}: {error}")
        self.log_offsets = {}
        try:
            self.handle = self.resubmit()
        except Exception as e:  # noqa: BLE001 - a step that cannot restart fails like any other
            # fray's package imports Ray (~0.8 s): only when a retry fails to start.
            from fray.inprocess import DoneJob

            e.remote_traceback = traceback.format_exc()  # type: ignore[attr-defined]
            self.handle = DoneJob(p.output_name, error=e)
        return True

    # -- the end -------------------------------------------------------------------------
    def finish(self, state: RunState) -> StepOutcome | None:
        """Publish a step that returned, record one that failed; None if the lease was lost."""
        # fray's package imports Ray (~0.8 s): only once a step has ended.
        from fray.cluster import JobFailed

        p = self.planned
        record = StepRecord(p.output_path)
        duration = time.time() - self.started
        reasons = [str(x) for x in p.reasons]
        try:
            timing = self.handle.result(timeout=0) if not self.lease.lost else None
            if self.lease.lost:
                raise LeaseLost(self.lease.lost)
        except LeaseLost as e:
            return self._lost(str(e))
        except BaseException as e:  # noqa: BLE001 - a step's failure is data, not a crash of the runner
            lost = self._lease_lost_now()
            if lost is not None:
                # Its process was ended by the lease's new holder (this runner was frozen past the
                # expiry, and revived before its heartbeat noticed): lost, not failed, and the
                # status record is the new holder's to write.
                return self._lost(lost)
            tb = self.mask(getattr(e, "remote_traceback", None) or traceback.format_exc())
            message = str(e)
            if isinstance(e, JobFailed) and message.startswith(f"job {p.output_name} failed: "):
                message = message[len(f"job {p.output_name} failed: "):]
            if is_lost_process(e):
                message += (f" (the step's process was lost on attempt {self.attempt}; "
                            f"{self.retries} retr{'y' if self.retries == 1 else 'ies'} used of resources.max_retries)")
            message = self.mask(message)
            self._close_log()
            try:
                self._record(BuildState.FAILED, error=message, tb=tb)
            finally:
                self.lease.release()
            return StepOutcome.of(p, Outcome.FAILED, reasons=reasons, error=message, traceback=tb,
                                  log_path=self.remote_log or self.local_log, duration=duration)
        try:
            self._close_log()
            # One listing of the whole output: its files for the manifest, its leases for the check
            # that this runner still holds the step before it writes any record.
            files = list(fs.walk_files(p.output_path))
            meta = meta_names(files)
            self.lease.check(meta)
            if self.attempt_folder:
                files = [(rel[len(self.attempt_folder) + 1:], size) for rel, size in files if rel.startswith(self.attempt_folder + "/")]
            manifest = compute_manifest(self.files_folder, files)
            fields = realisation_fields(state, p, manifest)
            odd = nondeterminism_of(p, manifest, fields, self.ctx.places, self.replaced)
            if odd is not None:
                logger.warning("%s: %s", p.output_name, odd)
            lost = sorted(name for name in meta if name.startswith(LOST_PREFIX))
            provenance = self._provenance(
                state, timing, manifest,
                # Earlier attempts that lost their lease and were stopped (not failed): their records.
                lost_attempts=[record.read_lost(name) for name in lost] if lost else None,
                nondeterminism=odd.to_json() if odd is not None else None)
            # Created, not overwritten: a holder that lost the lease cannot replace them afterwards.
            in_parallel(lambda rec: record.write_once(*rec, listed=meta, still_ours=self.lease.check),
                        [(record.manifest, manifest), (record.provenance, provenance.to_json())])
            self.lease.check()  # fencing: a runner that lost its lease never publishes
            published = record.publish(p.name, p.hash, manifest, fields, attempt_folder=self.attempt_folder,
                                       listed_absent=not record_listed(record.success, self.lease))
            if not published:
                # Another runner published first (it held the lease after ours was lost): its build stands.
                raise LeaseLost(f"{record.success} was written by another runner")
            state.published(state.plan.position(p.step), fields.output_digest or "", self.files_folder)
            done_index.mark(state.plan.store.prefix, p.output_name, provenance.env_digest)
        except LeaseLost as e:
            logger.warning("%s: %s; not publishing", p.output_name, e)
            self.lease.stop_heartbeat()
            self._record_lost(str(e))
            return None
        self.lease.clear()
        return StepOutcome.of(p, Outcome.RAN, reasons=reasons, log_path=self.remote_log or self.local_log,
                              duration=duration, note=str(odd) if odd is not None else None,
                              provenance=provenance, manifest=manifest)

    def _lease_lost_now(self) -> str | None:
        """Why this attempt's lease is lost, asking the store now; None while it still holds it."""
        try:
            self.lease.check()
        except LeaseLost as e:
            return str(e)
        except OSError:
            return None  # the store cannot say: the step's own failure stands
        return None

    def _lost(self, why: str) -> None:
        """The lease was lost: the step is stopped (if anything is left of it) and recorded as lost."""
        self.handle.cancel(grace_s=0)
        self._record_lost(why)
        logger.warning("%s: %s; waiting for the new holder", self.planned.output_name, why)

    def _record_lost(self, why: str) -> None:
        """Say, in a record of this lease's own (the status record is the new holder's), that this
        attempt lost its lease and was stopped: lost, not failed."""
        StepRecord(self.planned.output_path).write_lost(self.lease.token, attempt=self.attempt, holder=self.ctx.holder,
                                                        why=why, lost_at=self.lost_at)

    def cancel(self) -> StepOutcome:
        """Stop the job (the runner is interrupted); the step is left for the next run."""
        self.handle.cancel()
        self._record(BuildState.INTERRUPTED, error="interrupted by the runner")
        self.lease.release()
        return StepOutcome.of(self.planned, Outcome.INTERRUPTED, error="interrupted")

    def _close_log(self) -> None:
        """The whole log, masked, where it belongs (uploaded beside a remote output)."""
        if self.ctx.worker is not WorkerKind.LOCAL_PROCESS:
            self._pull_logs(final=True)
        elif self.mask and os.path.exists(self.local_log):
            self.mask.rewrite(self.local_log)
        if self.remote_log and os.path.exists(self.local_log):
            with open(self.local_log, "rb") as f:
                fs.atomic_write(self.remote_log, f.read())
            shutil.rmtree(os.path.dirname(self.local_log), ignore_errors=True)
            self.local_log = self.remote_log

    def _provenance(self, state: RunState, timing: Any, manifest: dict, *, lost_attempts: list[Any] | None,
                    nondeterminism: dict[str, Any] | None) -> Provenance:
        p, plan = self.planned, state.plan
        fingerprint, digest = self.ctx.environment()
        return Provenance(
            name=p.name,
            hash=p.hash,
            version=p.step.version,
            fn=fn_identity(p.step.fn),
            config=config_to_json(p.step.config, plan.paths()),
            config_flat=flatten_config(p.step.config, plan.hashes()),
            dependencies=tuple(Dependency(plan.steps[d].name, plan.steps[d].hash, plan.steps[d].output_path)
                               for d in p.deps),
            environment=fingerprint,
            env_digest=digest,
            strict_env=self.ctx.strict_env,
            host=host_of(fingerprint),
            runner=self.ctx.holder,
            started_at=self.started,
            finished_at=time.time(),
            duration_s=time.time() - self.started,
            attempts=self.attempt,
            retries=self.retries,
            client=type(self.ctx.client).__name__,
            resources=repr(p.step.resources) if p.step.resources is not None else None,
            reasons=[x.to_json() for x in p.reasons],
            worker=timing,
            output_bytes=manifest["total_bytes"],
            output_files=len(manifest["files"]),
            lost_attempts=lost_attempts,
            nondeterminism=nondeterminism,
        )
