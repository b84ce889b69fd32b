"""One attempt at building one step: start its process, poll it, retry it, finish or cancel it.

The attempt owns what belongs to it alone: its lease (held while it runs), its log
(:mod:`marin.execution.run.attempt_log`), its status record, and at the end its manifest,
provenance (:mod:`marin.execution.run.provenance`) and success record. It ends in one of three
ways (:meth:`StepAttempt.finish`): published, failed, or lost (its lease taken over).
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marin.execution.core.errors import UnserializableConfig
from marin.execution.core.identity import workspace_root
from marin.execution.core.traits import uses_accelerator
from marin.execution.core.walk import with_real_paths
from marin.execution.plan.model import PlannedStep
from marin.execution.run.attempt_context import (
    AttemptContext,
    NothingHeld,
    Releasable,
    WorkerKind,
    is_lost_process,
)
from marin.execution.run.attempt_log import AttemptLog
from marin.execution.run.outcome import Outcome, StepOutcome
from marin.execution.run.provenance import provenance_of
from marin.execution.run.publish import nondeterminism_of, realisation_fields, record_listed
from marin.execution.run.secrets import SecretMask
from marin.execution.run.state import RunState
from marin.execution.run.worker import FnRef, StepPayload
from marin.execution.store import done_index
from marin.execution.store.cache import copy_tree
from marin.execution.store.layout import LOST_PREFIX, files_folder
from marin.execution.store.listings import in_parallel
from marin.execution.store.manifest import (
    clear_output,
    compute_manifest,
    meta_names,
    remove_orphan_temporaries,
)
from marin.execution.store.provenance_record import Provenance
from marin.execution.store.realisations import Nondeterminism
from marin.execution.store.status_record import BuildState, StepStatus
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost

if TYPE_CHECKING:
    from fray.types import JobHandle

__all__ = ["StepAttempt"]

logger = logging.getLogger("marin.execution.step_runner")


@dataclass
class StepAttempt:
    """A step running under this runner's lease, from start to its outcome."""

    planned: PlannedStep
    lease: Lease
    ctx: AttemptContext
    handle: JobHandle = field(init=False)  # set by start()
    log: AttemptLog = field(init=False)  # set by start()
    first_attempt: int = 1
    """The attempt number this runner started with (earlier attempts are counted in the status record)."""
    started: float = field(default_factory=time.time)
    admission: Releasable = field(default_factory=NothingHeld)  # room on this machine while it runs
    resubmit: Callable[[], Any] | None = None
    retries: int = 0  # retries so far in this run
    mask: SecretMask = field(default_factory=SecretMask)
    replaced: tuple[SuccessRecord, dict[str, Any]] | None = None
    """A forced rebuild: the success record and manifest of the build it replaces."""
    lost_at: float | None = None
    """When the heartbeat found the lease lost (and stopped the step)."""
    attempt_folder: str = ""
    """Where this attempt writes the step's files, relative to its folder: "" for the folder
    itself, or its own attempt folder (:meth:`StepRecord.attempt_folder`) when an earlier holder's
    process may still be writing (:meth:`_choose_folder`)."""

    @property
    def attempt(self) -> int:
        """The number of the attempt running now, counting earlier runs' attempts."""
        return self.first_attempt + self.retries

    @property
    def retries_left(self) -> int:
        """Retries of a lost process left (``resources.max_retries`` less those used)."""
        return self.ctx.resources_of(self.planned.step).max_retries - self.retries

    @property
    def files_folder(self) -> str:
        """The folder this attempt's step writes its files in (its ``output_path``)."""
        return files_folder(self.planned.output_path, self.attempt_folder)

    # -- start ----------------------------------------------------------------------------
    @classmethod
    def start(cls, p: PlannedStep, lease: Lease, ctx: AttemptContext, paths: Mapping[int, str], *,
              clear: bool, expansions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (),
              admission: Releasable | None = None) -> StepAttempt | StepOutcome:
        """Start ``p`` under ``lease`` (already taken); a step that cannot start is a failed outcome.

        Args:
            clear: empty the output folder first (a forced rebuild).
            expansions: what its expanding inputs expanded into (:attr:`StepPayload.expansions`).
            admission: its room on this machine (an iris ``Admission``: the accelerator slots it holds).
        """
        from rigging.process import process_identity  # psutil: only when building

        record = StepRecord(p.output_path)
        self = cls(p, lease, ctx, mask=SecretMask.of(p.step.config), admission=admission or NothingHeld())
        lease.start_heartbeat()
        try:
            if clear:
                done_index.unmark(ctx.settings.prefix, [p.output_name])  # first: a marker never outlives its output
                clear_output(p.output_path)
            # The lease's listing of .marin/ says whether an earlier attempt left a status record.
            earlier = record.read_status() if record_listed(record.status, lease) else StepStatus(BuildState.MISSING)
            self._choose_folder(earlier)
            self.first_attempt = earlier.attempt + 1
            config = with_real_paths(p.step.config, paths)
            try:
                config_bytes = pickle.dumps(config)
            except Exception as e:  # noqa: BLE001 - reported as the step's failure
                raise UnserializableConfig(f"{p.name}: config cannot be sent to a worker: {e}") from e
            self.log = AttemptLog(p.output_path, self.mask, pulled=ctx.worker is not WorkerKind.LOCAL_PROCESS)
            root = workspace_root()
            payload = StepPayload(
                step_name=p.name,
                step_version=p.step.version,
                fn=FnRef.of(p.step.fn),
                config_pickle=config_bytes,
                output_path=self.files_folder,
                prefix=ctx.settings.prefix,
                expansions=expansions,
                start=p.start,
                log_path=self.log.local if ctx.worker is WorkerKind.LOCAL_PROCESS else None,
                sys_path=tuple(x for x in (root, *sys.path[:1]) if x),
                exit_on_preemption=ctx.worker is not WorkerKind.IN_PROCESS,
                lease=(lease.folder, lease.token, lease.ttl) if ctx.worker is not WorkerKind.IN_PROCESS else None,
                opens_accelerator=bool(self.admission.slots),
            )
            if fs.is_local(self.files_folder):
                os.makedirs(fs.strip_protocol(self.files_folder), exist_ok=True)
            self.resubmit = ctx.submitter(payload, ctx.resources_of(p.step), p.output_name, self.admission.slots,
                                          computes=uses_accelerator(p.step))
            self.handle = self.resubmit()
            lease.on_lost = self._stop_lost
            # One status record per start, written once the process exists so that it can name it.
            worker_pid = getattr(self.handle, "pid", None)
            local = isinstance(worker_pid, int) and ctx.worker is WorkerKind.LOCAL_PROCESS
            self._record(BuildState.RUNNING, worker=process_identity(worker_pid) if local and worker_pid else None)
        except Exception as e:  # noqa: BLE001 - a step that cannot start is that step's failure
            if (log := vars(self).get("log")) is not None:  # set once the config could be sent
                log.discard()
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
        self.log.poll(self.handle)

    def retry(self) -> bool:
        """Start the step again if its process died (rather than raising) and it has retries left."""
        if self.lease.lost or self.resubmit is None or self.retries_left <= 0:
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
        p = self.planned
        self.retries += 1
        logger.warning("%s: %s; retrying (attempt %d)", p.output_name, error, self.attempt)
        self.log.next_attempt(self.handle, f"\n[marin] attempt {self.attempt - 1} of {p.name} lost its process "
                                           f"({error}); starting attempt {self.attempt}\n")
        self._record(BuildState.RUNNING, error=f"attempt {self.attempt - 1}: {error}")
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
        """The job ended: publish a step that returned (:meth:`_published`), record one that failed
        (:meth:`_failed`); None if the lease was lost (:meth:`_lost`), before or while publishing."""
        duration = time.time() - self.started
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
            return self._failed(e, duration)
        return self._published(state, timing, duration)

    def _failed(self, e: BaseException, duration: float) -> StepOutcome:
        """The step raised, or its process was lost with no retry left: record it as failed.
        Called while ``e`` is being handled (its traceback is the current one)."""
        # fray's package imports Ray (~0.8 s): only once a step has ended.
        from fray.cluster import JobFailed

        p = self.planned
        tb = self.mask(getattr(e, "remote_traceback", None) or traceback.format_exc())
        message = str(e)
        if isinstance(e, JobFailed) and message.startswith(f"job {p.output_name} failed: "):
            message = message[len(f"job {p.output_name} failed: "):]
        if is_lost_process(e):
            message += (f" (the step's process was lost on attempt {self.attempt}; "
                        f"{self.retries} retr{'y' if self.retries == 1 else 'ies'} used of resources.max_retries)")
        message = self.mask(message)
        self.log.close(self.handle)
        try:
            self._record(BuildState.FAILED, error=message, tb=tb)
        finally:
            self.lease.release()
        return StepOutcome.of(p, Outcome.FAILED, reasons=[str(x) for x in p.reasons], error=message, traceback=tb,
                              log_path=self.log.path, duration=duration)

    def _published(self, state: RunState, timing: Any, duration: float) -> StepOutcome | None:
        """The step returned: publish its build under the lease; None (recorded as lost) when the
        lease turns out lost first: a runner that lost its lease never publishes."""
        p = self.planned
        try:
            self.log.close(self.handle)
            manifest, provenance, odd = self._publish(state, timing)
        except LeaseLost as e:
            logger.warning("%s: %s; not publishing", p.output_name, e)
            self.lease.stop_heartbeat()
            self._record_lost(str(e))
            return None
        self.lease.clear()
        return StepOutcome.of(p, Outcome.RAN, reasons=[str(x) for x in p.reasons], log_path=self.log.path,
                              duration=duration, note=str(odd) if odd is not None else None,
                              provenance=provenance, manifest=manifest)

    def _publish(self, state: RunState, timing: Any) -> tuple[dict[str, Any], Provenance, Nondeterminism | None]:
        """Write the build's manifest, provenance and success record, and its done marker, each
        after checking the lease; returns (manifest, provenance, its nondeterminism or None).

        Raises:
            LeaseLost: the lease was lost, or another runner published first.
        """
        p = self.planned
        record = StepRecord(p.output_path)
        # One listing of the whole output: its files for the manifest, its leases for the check
        # that this runner still holds the step before it writes any record.
        files = list(fs.walk_files(p.output_path))
        meta = meta_names(files)
        self.lease.check(meta)
        if self.attempt_folder:
            files = [(rel[len(self.attempt_folder) + 1:], size) for rel, size in files if rel.startswith(self.attempt_folder + "/")]
        manifest = compute_manifest(self.files_folder, files)
        fields = realisation_fields(state, p, manifest)
        odd = nondeterminism_of(p, manifest, fields, self.ctx.settings.places, self.replaced)
        if odd is not None:
            logger.warning("%s: %s", p.output_name, odd)
        lost = sorted(name for name in meta if name.startswith(LOST_PREFIX))
        provenance = provenance_of(
            p, state.plan, self.ctx, manifest, started=self.started, attempts=self.attempt, retries=self.retries,
            worker=timing,
            # Earlier attempts that lost their lease and were stopped (not failed): their records.
            lost_attempts=[record.read_lost(name) for name in lost] if lost else None,
            nondeterminism=odd.to_json() if odd is not None else None)
        # Created, not overwritten: a holder that lost the lease cannot replace them afterwards. Each
        # write is answered before the lease would be given up, or the lease counts as lost.
        def write_once(rec: tuple[str, dict[str, Any]]) -> None:
            with self.lease.fenced():
                record.write_once(*rec, listed=meta, still_ours=self.lease.check)

        in_parallel(write_once, [(record.manifest, manifest), (record.provenance, provenance.to_json())])
        self.lease.check()  # fencing: a runner that lost its lease never publishes
        with self.lease.fenced():
            published = record.publish(p.name, p.hash, manifest, fields, attempt_folder=self.attempt_folder,
                                       listed_absent=not record_listed(record.success, self.lease),
                                       ttl_s=p.step.ttl_s)
        if not published:
            # Another runner published first (it held the lease after ours was lost): its build stands.
            raise LeaseLost(f"{record.success} was written by another runner")
        state.published(state.plan.position(p.step), fields.output_digest or "", self.files_folder)
        done_index.mark(state.plan.store.prefix, p.output_name, provenance.env_digest, provenance.code_digest())
        return manifest, provenance, odd

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
        self.log.discard()  # the step's log is the new holder's to write
        self._record_lost(why)
        logger.warning("%s: %s; waiting for the new holder", self.planned.output_name, why)

    def _record_lost(self, why: str) -> None:
        """Say, in a record of this lease's own (the status record is the new holder's), that this
        attempt lost its lease and was stopped: lost, not failed."""
        StepRecord(self.planned.output_path).write_lost(self.lease.token, attempt=self.attempt, holder=self.ctx.holder,
                                                        why=why, lost_at=self.lost_at)

    def set_aside(self, why: str) -> None:
        """End this attempt without failing the step, which starts again later (it found the
        accelerator held by another process, or the runner was interrupted): recorded as
        interrupted, what it printed kept in its log, its lease given back."""
        self.log.end(self.handle)
        self._record(BuildState.INTERRUPTED, error=self.mask(why))
        self.lease.release()

    def cancel(self) -> StepOutcome:
        """Stop the job (the runner is interrupted); the step is left for the next run."""
        self.handle.cancel()
        self.set_aside("interrupted by the runner")
        return StepOutcome.of(self.planned, Outcome.INTERRUPTED, error="interrupted")
