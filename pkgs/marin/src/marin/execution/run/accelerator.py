"""The host's accelerator during a run: which one, who may see it, and waiting for it when another
process holds it.

Admission (``iris.admission``) keeps this run's own accelerator steps from sharing a slot. A
process that is not this run's may hold the accelerator anyway (another user's job, a leftover
process): before an admitted accelerator step starts, its runtime's lock file is asked who holds
it (``iris.chip_lock``), and the step waits, saying what holds it and for how long, up to
``accelerator_wait``; then it fails with one line naming the holder and the fix, its log the log of
its last attempt. A step whose process could not open the accelerator before its function ran (the
runtime found it held: ``iris.accelerator_open``) is the same wait, not a failure: it is set aside
and started again after a pause, its attempt not counted against ``max_retries``. An exception
the step's function raised is its own failure, whatever its text says.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from marin.execution.plan.model import PlannedStep
from rigging.config.discovery import bad_setting
from rigging.durations import format_duration

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator
    from marin.execution.run.attempt import StepAttempt

__all__ = ["AcceleratorGate", "AcceleratorSettings", "host_accelerator"]

REPORT_EVERY_S = 30.0
"""A step still waiting for the accelerator says so again this often (and whenever the holder changes)."""

_FIRST_PAUSE_S = 0.5  # after a step found the accelerator held: doubled each time, up to _LONGEST_PAUSE_S
_LONGEST_PAUSE_S = 15.0


class AcceleratorSettings(Protocol):
    """Where the accelerator settings come from: a run's ``RunSettings`` or the configuration
    (``rigging.config.discovery.MarinConfig``)."""

    @property
    def accelerator(self) -> str | None: ...

    @property
    def accelerator_slots(self) -> int: ...

    @property
    def sources(self) -> Mapping[str, str]: ...


def host_accelerator(settings: AcceleratorSettings) -> HostAccelerator | None:
    """This host's accelerator as the settings state it (``accelerator``), else as found on the
    host, split in ``accelerator_slots``; None: the host has none.

    Raises:
        rigging.config.discovery.ConfigError: a stated accelerator or a split that cannot be, naming
            the setting and where it came from.
    """
    # Cheap (fray's request types, the standard library); not at import: a run without local steps never asks.
    from iris.accelerator import detect_accelerator, parse_accelerator

    if settings.accelerator is None:
        found = detect_accelerator()
    else:
        where = settings.sources.get("accelerator", "override")
        try:
            found = parse_accelerator(settings.accelerator, source=f"stated in {where}")
        except ValueError as e:
            raise bad_setting("accelerator", where, str(e)) from None
    if found is None or settings.accelerator_slots == 1:
        return found
    try:
        return found.with_slots(settings.accelerator_slots)
    except ValueError as e:
        raise bad_setting("accelerator_slots", settings.sources.get("accelerator_slots", "override"), str(e)) from None


@dataclass
class _Wait:
    """One step's wait for an accelerator held by someone else."""

    since: float
    holder: str = "the accelerator is held by another process"
    held_by: str = "held by another process"
    """How the failure line says it stayed: held by a process, or unavailable (a lock file this
    user may not open names no holder)."""
    not_before: float = 0.0
    pause: float = _FIRST_PAUSE_S
    said: str = ""
    said_at: float = -math.inf
    active: bool = True
    """It waits now (False once it started: its ``since`` still counts if it finds the accelerator held again)."""


class AcceleratorGate:
    """Lets an admitted accelerator step start only when no other process holds the accelerator.

    Args:
        lock: the lock file its runtime holds (``accelerator_lock``); None: none is checked (the
            step's own error still tells).
        wait_s: how long a step waits before it fails (``accelerator_wait``).
        report: told, for a waiting step, a line saying what holds the accelerator and for how long.
        clock: the time source (tests).
    """

    def __init__(self, lock: str | None, wait_s: float, report: Callable[[PlannedStep, str], None],
                 clock: Callable[[], float] = time.monotonic):
        self.lock = lock
        self.wait_s = wait_s
        self.report = report
        self._clock = clock
        self._waits: dict[str, _Wait] = {}
        self._logs: dict[str, str] = {}

    @property
    def waiting(self) -> bool:
        """Whether a step waits for the accelerator now (the run is not stalled while one does)."""
        return any(w.active for w in self._waits.values())

    def clear(self, p: PlannedStep, ours_running: bool) -> bool | str:
        """May ``p`` (admitted to the accelerator) start now? True: start it; False: it waits; a
        line: it waited ``wait_s`` in vain and fails with that line.

        Args:
            ours_running: another step of this run holds part of the accelerator now: then a
                holder of the lock file may be that step, and only the step's own error can tell.
        """
        # Not at import: only a run with an accelerator step asks (fcntl, struct).
        from iris.chip_lock import lock_holder

        now = self._clock()
        wait = self._waits.get(p.output_name)
        holder = None if ours_running or self.lock is None else lock_holder(self.lock)
        if holder is None and (wait is None or now >= wait.not_before):
            if wait is not None:
                wait.active = False
            return True
        if wait is None:
            wait = self._waits[p.output_name] = _Wait(since=now)
        wait.active = True
        if holder is not None:
            wait.holder = holder.describe()
            wait.held_by = "held by another process" if holder.readable else "unavailable"
        waited = now - wait.since
        if waited >= self.wait_s:
            del self._waits[p.output_name]
            # The log of its last attempt (:meth:`last_log`) goes with the failure as its log, named once.
            return (f"the accelerator stayed {wait.held_by} for {format_duration(waited)} "
                    f"(accelerator_wait): {wait.holder}; end that process or let it finish, then run again "
                    f"(or raise accelerator_wait)")
        if wait.holder != wait.said or now - wait.said_at >= REPORT_EVERY_S:
            wait.said, wait.said_at = wait.holder, now
            self.report(p, f"{wait.holder}; waited {format_duration(waited)} of {format_duration(self.wait_s)} "
                           "(accelerator_wait)")
        return False

    def last_log(self, p: PlannedStep) -> str | None:
        """The log of ``p``'s last attempt that could not open the accelerator, if one started."""
        return self._logs.get(p.output_name)

    def found_held(self, p: PlannedStep, line: str, log: str | None = None) -> None:
        """``p``'s process could not open the accelerator (its runtime said ``line``; ``log``: that
        attempt's log): it waits a pause (longer each time) before it may start again, within the
        same ``wait_s``."""
        # Not at import: only a run with an accelerator step asks (fcntl, struct).
        from iris.chip_lock import lock_holder

        now = self._clock()
        wait = self._waits.setdefault(p.output_name, _Wait(since=now))
        if log:
            self._logs[p.output_name] = log
        holder = lock_holder(self.lock) if self.lock is not None else None
        if holder is not None and not holder.readable:
            wait.holder, wait.held_by = f"the step could not open it ({line}): {holder.describe()}", "unavailable"
            return self._pause(wait, now)
        wait.holder = f"the step found it held ({line})"
        return self._pause(wait, now)

    @staticmethod
    def _pause(wait: _Wait, now: float) -> None:
        wait.active = True
        wait.not_before = now + wait.pause
        wait.pause = min(wait.pause * 2, _LONGEST_PAUSE_S)


def found_accelerator_held(attempt: StepAttempt) -> str | None:
    """The runtime's line when an ended accelerator step's process could not open the accelerator
    before its function ran (libtpu's lock file error, a busy GPU at start), or None: it did not
    end so (an error its function raised is its failure, whatever its text)."""
    # Not at import: only an accelerator step that ended asks.
    from iris.accelerator_open import unavailable_line

    if not attempt.admission.slots or attempt.lease.lost:
        return None
    try:
        attempt.handle.result(timeout=0)
    except BaseException as e:  # noqa: BLE001 - only read here: finish() reports any other failure
        return unavailable_line(e)
    return None
