"""Errors raised by zephyr pipelines; each message is one line naming the file and line or record."""

from __future__ import annotations

from rigging.log import printable

__all__ = ["DataError", "ShardFailed"]


class DataError(ValueError):
    """Input (or a written shard) that cannot be read as promised.

    Attributes:
        path: the file at fault (or the source pattern, when nothing matched).
        location: ``"line N"``, ``"record N"`` or ``""`` when the whole file is at fault.
    """

    def __init__(self, path: str, location: str, problem: str):
        # What a damaged file puts in the problem (a JSON key decoded from "\\ud800", say) may hold lone
        # surrogates, which no UTF-8 log, terminal or report can write: they are shown escaped.
        problem = printable(problem)
        where = f"{path}: {location}: " if location else f"{path}: "
        super().__init__(where + problem)
        self.path = path
        self.location = location
        self.problem = problem

    def __reduce__(self):
        # Keep the structured fields when the error crosses a process boundary.
        return (DataError, (self.path, self.location, self.problem))


class ShardFailed(RuntimeError):
    """A shard of a pipeline failed on its worker; the message carries the worker's error."""

    def __init__(self, message: str, shard_index: int, remote_traceback: str | None = None):
        super().__init__(message)
        self.shard_index = shard_index
        self.remote_traceback = remote_traceback
