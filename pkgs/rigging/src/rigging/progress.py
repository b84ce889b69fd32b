"""How far a long piece of work has got, as a small record beside its output.

A training loop or a tokenizer calls :meth:`ProgressWriter.update` as it goes; the record lands in
``<output>/.marin/progress.json`` (any fsspec URL, so a worker on another host writes where the
runner reads), at most once per ``interval`` seconds and always at the end. Whoever watches the
work (marin's runner display) reads it back with :func:`read_progress`::

    {"unit": "step", "done": 120, "total": 400, "started_at": ..., "updated_at": ...,
     "eta_s": 41.0, "metrics": {"loss": 2.31, "tokens_per_s": 46000.0}}
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rigging import filesystem as fs

__all__ = ["PROGRESS_FILE", "ProgressRecord", "ProgressWriter", "progress_path", "read_progress"]

logger = logging.getLogger(__name__)

PROGRESS_FILE = ".marin/progress.json"
"""Where the record lives, relative to the output folder (beside the step's other records)."""


def progress_path(output_path: str) -> str:
    """The progress record of the work whose output is ``output_path``."""
    return fs.join(output_path, PROGRESS_FILE)


@dataclass(frozen=True)
class ProgressRecord:
    """One snapshot of the work's progress."""

    unit: str
    """What is counted: ``"step"``, ``"shard"``."""
    done: int
    """Units finished."""
    total: int
    """Units in all."""
    started_at: float
    """When the writer started (epoch seconds)."""
    updated_at: float
    """When this snapshot was taken (epoch seconds)."""
    eta_s: float | None = None
    """Seconds left at the rate measured since the writer's first update (None: not known yet)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Numbers worth showing beside the count (``loss``, ``tokens_per_s``)."""

    def __post_init__(self) -> None:
        if not self.unit:
            raise ValueError(f"unit must be non-empty, got {self.unit!r}")
        if self.total < 0:
            raise ValueError(f"total must be >= 0, got {self.total}")
        if not 0 <= self.done:
            raise ValueError(f"done must be >= 0, got {self.done}")

    @property
    def fraction(self) -> float:
        """Share done, in [0, 1] (1 when there is nothing to do)."""
        return min(1.0, self.done / self.total) if self.total else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "done": self.done, "total": self.total, "started_at": self.started_at,
                "updated_at": self.updated_at, "eta_s": self.eta_s, "metrics": dict(self.metrics)}

    @classmethod
    def from_json(cls, data: Any) -> ProgressRecord | None:
        """The record ``data`` describes, or None when it is not one (a damaged file shows nothing)."""
        if not isinstance(data, dict):
            return None
        try:
            metrics = {str(k): float(v) for k, v in (data.get("metrics") or {}).items()
                       if isinstance(v, int | float) and math.isfinite(v)}
            eta = data.get("eta_s")
            return cls(unit=str(data["unit"]), done=int(data["done"]), total=int(data["total"]),
                       started_at=float(data["started_at"]), updated_at=float(data["updated_at"]),
                       eta_s=float(eta) if isinstance(eta, int | float) else None, metrics=metrics)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def read_progress(output_path: str) -> ProgressRecord | None:
    """The newest progress record beside ``output_path``, or None when there is none (yet)."""
    try:
        text = fs.read_text(progress_path(output_path))
    except FileNotFoundError:
        return None
    try:
        return ProgressRecord.from_json(json.loads(text))
    except ValueError:
        return None  # caught mid-replace on a store without atomic renames: the next read sees it


class ProgressWriter:
    """Writes the progress of ``total`` units of work beside ``output_path``.

    Args:
        output_path: the output folder of the work (local path or URL).
        total: units in all.
        unit: what is counted (``"step"``, ``"shard"``).
        interval: least seconds between two writes; the final update (``done == total``) is always
            written.
        clock: the time source (tests).
    """

    def __init__(self, output_path: str, total: int, unit: str, *, interval: float = 1.0,
                 clock: Callable[[], float] = time.time):
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        if interval < 0:
            raise ValueError(f"interval must be >= 0, got {interval}")
        self.path = progress_path(output_path)
        self.total = total
        self.unit = unit
        self.interval = interval
        self._clock = clock
        self._started = clock()
        self._first: tuple[int, float] | None = None  # (done, time) of the first update: the rate's origin
        self._written = -math.inf
        self._warned = False

    def update(self, done: int, **metrics: float) -> ProgressRecord | None:
        """Note that ``done`` units are finished; returns the record when it was written."""
        now = self._clock()
        if self._first is None:
            self._first = (done, now)
        if done < self.total and now - self._written < self.interval:
            return None
        record = ProgressRecord(unit=self.unit, done=done, total=self.total, started_at=self._started,
                                updated_at=now, eta_s=self._eta(done, now),
                                metrics={k: float(v) for k, v in metrics.items()
                                         if isinstance(v, int | float) and math.isfinite(v)})
        try:
            fs.atomic_write(self.path, json.dumps(record.to_json()), durable=False)  # a note to watch, not a record
        except OSError as e:
            # Progress is for watching; a store hiccup must not end hours of work. Said once.
            if not self._warned:
                logger.warning("cannot write progress to %s: %s", self.path, e)
                self._warned = True
            return None
        self._written = now
        return record

    def _eta(self, done: int, now: float) -> float | None:
        if done >= self.total:
            return 0.0
        assert self._first is not None
        first_done, first_time = self._first
        if done <= first_done or now <= first_time:
            return None
        rate = (done - first_done) / (now - first_time)
        return (self.total - done) / rate
