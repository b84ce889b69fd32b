"""A finished build's provenance: what was built, from what, where, by whom, how long it took."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from marin.execution.core.encoding import config_to_json, flatten_config
from marin.execution.core.identity import fn_identity
from marin.execution.plan.model import Plan, PlannedStep
from marin.execution.run.attempt_context import AttemptContext
from marin.execution.store.environment import host_of
from marin.execution.store.provenance_record import Dependency, Provenance

__all__ = ["provenance_of"]


def provenance_of(p: PlannedStep, plan: Plan, ctx: AttemptContext, manifest: Mapping[str, Any], *,
                  started: float, attempts: int, retries: int, worker: Any,
                  lost_attempts: list[Any] | None, nondeterminism: dict[str, Any] | None) -> Provenance:
    """The provenance of ``p``'s build, finished now.

    Args:
        plan: the run's plan (``p``'s inputs, and the paths and hashes its config names).
        ctx: what the run's attempts share (environment, runner, client, settings).
        manifest: the build's manifest (:func:`marin.execution.store.manifest.compute_manifest`).
        started: when the attempt started (seconds since the epoch).
        attempts: attempts counted so far, this one included; ``retries``: of them, in this run.
        worker: the worker's timing of the step (what its job returned), with what the step
            reported of its build (``incremental``: kept apart, in :attr:`Provenance.incremental`).
        lost_attempts: the records of earlier attempts that lost their lease and were stopped.
        nondeterminism: how the build differs from another of the same inputs, if it does.
    """
    # Not at import: the code's digest is made only for a build that finished.
    from marin.execution.store.code_digest import code_digest

    fingerprint, digest = ctx.environment()
    # The worker's result holds its timings and what the step reported (run.worker.run_step).
    reported = worker if isinstance(worker, dict) else {}
    incremental = reported.get("incremental")
    requests = reported.get("store_requests")
    if incremental is not None or requests is not None:
        worker = {k: v for k, v in reported.items() if k not in ("incremental", "store_requests")}
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
        strict_env=ctx.settings.strict_env,
        host=host_of(fingerprint),
        runner=ctx.holder,
        started_at=started,
        finished_at=time.time(),
        duration_s=time.time() - started,
        attempts=attempts,
        retries=retries,
        client=type(ctx.client).__name__,
        resources=repr(p.step.resources) if p.step.resources is not None else None,
        reasons=[x.to_json() for x in p.reasons],
        worker=worker,
        output_bytes=manifest["total_bytes"],
        output_files=len(manifest["files"]),
        lost_attempts=lost_attempts,
        nondeterminism=nondeterminism,
        sources=[f.to_json() for f in p.sources] or None,
        code=code_digest(p.step.fn).to_json(),
        incremental=incremental if isinstance(incremental, dict) else None,
        store_requests=requests if isinstance(requests, dict) else None,
    )
