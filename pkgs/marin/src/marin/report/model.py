"""What a report shows: each step's state and details, and the whole report's data (the JSON the
page is drawn from); :mod:`marin.report.collect` fills it from a plan, a run and the store."""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass, field
from typing import Any

from marin.execution.core.step import name_group
from marin.execution.store.store import StepStore
from marin.report.views import views_json

__all__ = ['ReportData', 'ReportStep', 'StepState']


class StepState(enum.Enum):
    """How a step stands in the report (the node's colour)."""

    CACHED = "cached"
    RAN = "ran"
    FAILED = "failed"
    UPSTREAM_FAILED = "upstream failed"
    WOULD_RUN = "would run"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    UNNEEDED = "unneeded"


# States whose log tail is worth embedding (the log explains them).


@dataclass
class ReportStep:
    """One step as the report shows it.

    Attributes:
        name: the step's name.
        hash: its full hash.
        output_path: its output folder.
        state: how it stands.
        deps: indexes (into ``ReportData.steps``) of the steps it reads.
        reasons: why it ran, runs or would run (from the plan), one line each.
        built_because: for a step built earlier, the reasons recorded when it was built.
        fn: ``module:qualname`` of its function.
        version: its version string.
        config: the resolved config (placeholders as paths, secrets redacted).
        environment: the environment it was built in (None until it finished once).
        started_at, finished_at, duration_s: timings of the build (seconds since the epoch / seconds).
        estimate_s, estimate_basis: the run's estimate of the build, and where it came from
            ("no estimate: never built before"); None when the step was not estimated.
        attempts: how many attempts the build took.
        host: where it was built.
        output_bytes, output_files: the size of its output (from the manifest).
        error, traceback: why the last attempt failed.
        log_path, log_tail: its log, and the end of it for failed or running steps.
        note: a remark from the runner ("built by another runner", "built in a different environment").
        metrics: the series of its ``metrics.jsonl`` (training steps).
        memory: per-device bytes of parameters, optimizer state and step temporaries (training steps).
        tokenized: the summary of its ``index.json`` (tokenize steps).
        data: the counts and examples of its ``_summary.json`` (data-curation steps).
    """

    name: str
    hash: str
    output_path: str
    state: StepState
    deps: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    built_because: list[str] = field(default_factory=list)
    fn: str | None = None
    version: str | None = None
    config: Any = None
    environment: dict[str, Any] | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    estimate_s: float | None = None
    estimate_basis: str | None = None
    attempts: int | None = None
    host: str | None = None
    output_bytes: int | None = None
    output_files: int | None = None
    error: str | None = None
    traceback: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    note: str | None = None
    metrics: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    tokenized: dict[str, Any] | None = None
    data: dict[str, Any] | None = None

    @property
    def short_hash(self) -> str:
        return self.hash[:8]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hash": self.hash,
            "short_hash": self.short_hash,
            "output_path": self.output_path,
            "state": self.state.value,
            "deps": self.deps,
            "reasons": self.reasons,
            "built_because": self.built_because,
            "fn": self.fn,
            "version": self.version,
            "config": self.config,
            "environment": self.environment,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            "estimate_s": self.estimate_s,
            "estimate_basis": self.estimate_basis,
            "attempts": self.attempts,
            "host": self.host,
            "output_bytes": self.output_bytes,
            "output_files": self.output_files,
            "error": self.error,
            "traceback": self.traceback,
            "log_path": self.log_path,
            "log_tail": self.log_tail,
            "note": self.note,
            "metrics": self.metrics,
            "memory": self.memory,
            "tokenized": self.tokenized,
            "data": self.data,
        }


@dataclass
class ReportData:
    """Everything one report shows; :meth:`to_json` is what the page embeds."""

    title: str
    prefix: str
    source: str  # "run" (the outcome of a run), "plan" (a plan against the store) or "store" (every finished step)
    steps: list[ReportStep]
    generated_at: float = field(default_factory=time.time)
    environment: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None  # marin.report.compare.Comparison.to_json(), with training steps
    views: dict[str, Any] | None = None  # marin.report.views: the leaderboard and the scaling-law fits

    def summary(self) -> dict[str, int]:
        """How many steps are in each state (states with none left out)."""
        counts = {state.value: 0 for state in StepState}
        for step in self.steps:
            counts[step.state.value] += 1
        return {k: v for k, v in counts.items() if v}

    def to_json(self) -> dict[str, Any]:
        """The page's data, kept small for graphs of thousands of steps: each distinct build
        environment once (steps name theirs by index, ``env``), steps grouped by
        :func:`marin.execution.step.name_group` (``group`` indexes ``groups``), and empty
        fields (None, [], "") left out."""
        environments: list[dict[str, Any]] = []
        env_index: dict[str, int] = {}
        groups: list[str] = []
        group_index: dict[str, int] = {}
        steps = []
        store = StepStore(self.prefix) if self.prefix else None
        for step in self.steps:
            row = {k: v for k, v in step.to_json().items() if v is not None and v != [] and v != ""}
            env = row.pop("environment", None)
            if env is not None:
                key = json.dumps(env, sort_keys=True, default=str)
                if key not in env_index:
                    env_index[key] = len(environments)
                    environments.append(env)
                row["env"] = env_index[key]
            group = name_group(step.name)
            if group not in group_index:
                group_index[group] = len(groups)
                groups.append(group)
            row["group"] = group_index[group]
            row.pop("short_hash", None)  # the page takes the first 8 characters of the hash
            if store is not None and step.output_path == store.output_path_of(step.name, step.hash):
                del row["output_path"]  # where the store puts it: the page spells it out again
            steps.append(row)
        return {
            "format": "marin.report/v2",
            "title": self.title,
            "prefix": self.prefix,
            "source": self.source,
            "generated_at": self.generated_at,
            "environment": self.environment,
            "environments": environments,
            "groups": groups,
            "summary": self.summary(),
            "steps": steps,
            "comparison": self.comparison,
            "views": self._views_json(),
        }

    def _views_json(self) -> dict[str, Any] | None:
        if self.views is None:
            return None
        return views_json(self.views)
