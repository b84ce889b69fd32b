"""The entries ``os.scandir`` yields while a ``marin run`` records (:mod:`marin.cli.noop_watch`): each
entry's ``stat()``, and ``is_dir()``/``is_file()`` of a symbolic link, is a question noted with its
answer (a plain entry's kind is the listing's, which the folder's own ``stat`` covers).

Standard library only, like the rest of the recorder.
"""

from __future__ import annotations

import os

from marin.cli import noop, noop_watch

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["scandir_wrapper"]

_S_IFDIR, _S_IFREG = 0o040000, 0o100000


class _Entry:
    """An ``os.DirEntry`` whose ``stat()`` (and ``is_dir()``/``is_file()`` through a symbolic link)
    is noted; everything else is the entry's own."""

    __slots__ = ("_entry",)

    def __init__(self, entry: os.DirEntry[Any]):
        self._entry = entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)

    def __fspath__(self) -> Any:
        return self._entry.__fspath__()

    def __repr__(self) -> str:
        return repr(self._entry)

    @property
    def name(self) -> Any:
        return self._entry.name

    @property
    def path(self) -> Any:
        return self._entry.path

    def _kind(self, follow_symlinks: bool, test: int, real: Callable[..., bool]) -> bool:
        if not follow_symlinks or not self._entry.is_symlink() or noop_watch.busy():
            return real(follow_symlinks=follow_symlinks)
        where = noop_watch.path_of(self._entry.path)
        with noop_watch.BUSY as noting:
            answer = noop.ask(noop.KIND, where) if where is not None else None
            if noting:
                noop_watch.note(noop.KIND, where, None, answer)
        return isinstance(answer, int) and answer > 0 and answer == test

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._kind(follow_symlinks, _S_IFDIR, self._entry.is_dir)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._kind(follow_symlinks, _S_IFREG, self._entry.is_file)

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        kind = noop.STAT if follow_symlinks else noop.LSTAT
        if noop_watch.busy():
            return self._entry.stat(follow_symlinks=follow_symlinks)
        with noop_watch.BUSY as noting:
            try:
                st = self._entry.stat(follow_symlinks=follow_symlinks)
            except OSError as e:
                if noting:
                    noop_watch.note(kind, noop_watch.path_of(self._entry.path), None, noop.error_answer(e))
                raise
            if noting:
                noop_watch.note(kind, noop_watch.path_of(self._entry.path), None, st)
            return st


class _Entries:
    """``os.scandir``'s iterator, yielding :class:`_Entry`."""

    def __init__(self, entries: Any):
        self._entries = entries

    def __iter__(self) -> _Entries:
        return self

    def __next__(self) -> _Entry:
        return _Entry(next(self._entries))

    def __enter__(self) -> _Entries:
        return self

    def __exit__(self, *exc: object) -> None:
        self._entries.close()

    def close(self) -> None:
        self._entries.close()


def scandir_wrapper(real: Callable[..., Any]) -> Callable[..., Any]:
    """``os.scandir``, yielding entries whose questions are noted while a recording is active."""

    def scandir(path: Any = ".") -> Any:
        entries = real(path)  # the audit hook notes the folder's own stat
        recording = noop_watch.recording()
        if isinstance(path, int) or recording is None or not recording.active:
            return entries
        return _Entries(entries)

    return noop_watch.named(scandir, real)
