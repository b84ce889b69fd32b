"""An attempt's log: where it is written, what a worker elsewhere printed, and where it ends up."""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Any

from marin.execution.run.secrets import SecretMask
from marin.execution.store.step_record import StepRecord
from rigging import filesystem as fs
from rigging.tempdirs import MARIN_STEP_LOG, owned_tempdir

__all__ = ["AttemptLog"]

logger = logging.getLogger(__name__)

_PULL_INTERVAL_S = 1.0


class AttemptLog:
    """The log of one step's attempts, masked of the step's secrets.

    A step whose output is local logs beside it; one whose output is elsewhere logs into a local
    temporary file, uploaded beside its output when the attempt ends (:meth:`close`). A worker on
    this machine writes the log itself; what a worker elsewhere (in-process, Ray) printed is
    pulled from its job's handle (:meth:`pull`).

    Args:
        output_path: the step's output folder.
        mask: hides the step's secrets in what is written.
        pulled: the worker does not write the log itself: it is pulled from the job's handle.
    """

    def __init__(self, output_path: str, mask: SecretMask, *, pulled: bool):
        record = StepRecord(output_path)
        self.remote: str | None = None
        """Where the log is uploaded when the attempt ends (its output is not local); None: it stays put."""
        self._scratch: str | None = None  # the temporary folder of a remote output's log, until it ends
        if fs.is_local(output_path):
            self.local = fs.strip_protocol(record.log)
        else:
            self._scratch = owned_tempdir(MARIN_STEP_LOG)  # a killed runner's is found by `marin gc`
            self.local, self.remote = os.path.join(self._scratch, "log.txt"), record.log
        self._mask = mask
        self._pulled = pulled
        self._offsets: dict[int, int] = {}  # per host's handle: how much of its output is in the log
        self._polled = 0.0

    @property
    def path(self) -> str:
        """Where the log is read: beside the output once uploaded, else the local file."""
        return self.remote or self.local

    def append(self, text: str) -> None:
        """Add ``text`` (masked) to the log."""
        os.makedirs(os.path.dirname(self.local), exist_ok=True)
        with open(self.local, "a", encoding="utf-8") as f:
            f.write(self._mask(text))

    def poll(self, handle: Any) -> None:
        """Copy what a worker elsewhere printed since the last poll into the log (at most once a second)."""
        if self._pulled:
            self.pull(handle)

    def pull(self, handle: Any, *, final: bool = False) -> None:
        """Copy what the job (each of its hosts' jobs) printed since the last pull; unless ``final``,
        at most once a second."""
        now = time.monotonic()
        if not final and now - self._polled < _PULL_INTERVAL_S:
            return
        self._polled = now
        chunks = []
        for i, h in enumerate(getattr(handle, "handles", None) or [handle]):
            text = h.logs()
            sent = self._offsets.get(i, 0)
            if len(text) > sent:
                chunks.append(text[sent:])
                self._offsets[i] = len(text)
        if chunks:
            self.append("".join(chunks))

    def next_attempt(self, handle: Any, note: str) -> None:
        """The attempt's process was lost and the step starts again: the rest of what it printed,
        then ``note``; the next job's output is pulled from its start."""
        if self._pulled:
            self.pull(handle, final=True)
        self.append(note)
        self._offsets = {}

    def close(self, handle: Any) -> None:
        """The whole log, masked, where it belongs (uploaded beside a remote output)."""
        if self._pulled:
            self.pull(handle, final=True)
        elif self._mask and os.path.exists(self.local):
            self._mask.rewrite(self.local)
        if self.remote and os.path.exists(self.local):
            with open(self.local, "rb") as f:
                fs.atomic_write(self.remote, f.read())
            self.local = self.remote
        self.discard()

    def end(self, handle: Any) -> None:
        """:meth:`close`; where the log cannot be kept (its store unreachable), :meth:`discard` it
        with a warning: an attempt set aside still records that and gives its lease back."""
        try:
            self.close(handle)
        except Exception as e:  # noqa: BLE001 - the log is not worth the step's record
            logger.warning("the log of %s could not be kept: %s", self.remote or self.local, e)
            self.discard()

    def discard(self) -> None:
        """Remove the local copy of a remote output's log (uploaded by :meth:`close`, or not this
        attempt's to upload any more: its lease was lost, it never started). Idempotent."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
