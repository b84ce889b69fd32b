"""Where a step's newest attempt stands: its states, its status record (``.marin/status.json``) and
the status a reader makes of that record and the step's lease."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from marin.execution.store.layout import is_attempt_folder
from marin.execution.store.record_json import (
    ATTEMPT_FOLDER_KEY,
    RECORD_FORMAT,
    RecordKey,
    fields_from,
    is_int,
    is_number,
    is_str,
    json_of,
)

__all__ = ["WRITTEN_STATES", "BuildState", "StatusRecord", "StepStatus"]


class BuildState(enum.Enum):
    """Where a step's newest attempt stands, as its records and its lease say.

    The runner writes ``RUNNING``, ``FAILED`` and ``INTERRUPTED``; a reader gets ``RUNNING`` only
    while a runner holds the step's lease, ``KILLED`` for an attempt that stopped without a word
    (its runner died), ``MISSING`` when no attempt left a readable record.
    """

    MISSING = "missing"
    RUNNING = "running"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    KILLED = "killed"


WRITTEN_STATES = (BuildState.RUNNING, BuildState.FAILED, BuildState.INTERRUPTED)
"""The states a runner writes in a status record; the others are what a reader concludes."""


def _is_state(value: Any) -> bool:
    return isinstance(value, str) and value in {s.value for s in WRITTEN_STATES}


@dataclass(frozen=True)
class StatusRecord:
    """``.marin/status.json``: the newest attempt of a step, as its runner wrote it."""

    state: BuildState | None = None
    """What the runner wrote (running, failed, interrupted); None when the record has no such state."""
    attempt: int = 0
    holder: str | None = None
    """The runner that made the attempt."""
    time: float | None = None
    """When it was written."""
    worker: str | None = None
    """The attempt's process (``rigging.process.process_identity``), when the runner knows it."""
    attempt_folder: str = ""
    """The attempt folder it writes in (:func:`~marin.execution.store.layout.attempt_folder`), "" for
    the step's folder."""
    error: str | None = None
    traceback: str | None = None
    format: int = RECORD_FORMAT
    """The record's form as read (0: written before records carried one)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this code does not know (or values of the wrong type), kept as they were."""

    _KEYS: ClassVar[tuple[RecordKey, ...]] = (
        RecordKey("state", "state", _is_state, always=True),
        RecordKey("attempt", "attempt", is_int, always=True),
        RecordKey("holder", "holder", is_str, always=True), RecordKey("time", "time", is_number, always=True),
        RecordKey("worker", "worker", is_str),
        RecordKey("attempt_folder", ATTEMPT_FOLDER_KEY, is_attempt_folder),
        RecordKey("error", "error", is_str), RecordKey("traceback", "traceback", is_str))

    def to_json(self) -> dict[str, Any]:
        body = json_of(self, self._KEYS)
        if "state" not in self.extra:
            if self.state is not None:
                body["state"] = self.state.value
            else:
                del body["state"]
        return body

    @classmethod
    def from_json(cls, data: Any) -> StatusRecord | None:
        kwargs = fields_from(data, cls._KEYS)
        if kwargs is None:
            return None
        if "state" in kwargs:
            kwargs["state"] = BuildState(kwargs["state"])
        return cls(**kwargs)


@dataclass(frozen=True)
class StepStatus:
    """The newest attempt of a step: its state, as its status record and its lease say."""

    state: BuildState
    attempt: int = 0
    holder: str | None = None
    """Who ran the attempt; for ``RUNNING``, who holds the lease now."""
    error: str | None = None
    record: StatusRecord | None = None
    """The status record itself (``time``, ``traceback``, ``worker`` ...); None when there is none."""
    written: BuildState | None = None
    """The state the runner wrote, before the lease was consulted."""
