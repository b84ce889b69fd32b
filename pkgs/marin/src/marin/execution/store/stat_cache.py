"""Local files' SHA-256 remembered by what ``stat`` says of them, as DVC's state database and git's
index do: an unchanged file is read once, ever; a touched one is read again.

The cache is one SQLite file (write-ahead log, busy timeout), shared by every process and run of
a user: ``MARIN_STAT_CACHE``, else ``$XDG_CACHE_HOME/marin/stat-cache.sqlite``, else
``~/.cache/marin/stat-cache.sqlite``. A row is keyed by (device, inode) and holds the size,
``mtime_ns`` and ``ctime_ns`` its digest was read at; any difference in them is a miss. The change
time is there because a modification time can be put back (``touch -d``, ``cp -p``, an editor
that keeps it) after a same-size edit; the change time cannot be set by a user.
"""

from __future__ import annotations

import array
import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from rigging.config.discovery import user_cache_folder

__all__ = ["StatCache", "default_stat_cache", "listing_signature", "stat_cache_path", "trusted"]

logger = logging.getLogger(__name__)

# A file modified less than this before it was read is not remembered ("racily clean", as git
# says): a write right after the read could keep its mtime (file systems stamp mtimes at a clock
# tick of a few milliseconds, FAT and some network file systems at 1-2 s). Such a file is read
# again next time, when it is old enough to be trusted.
_RACY_NS = 2_000_000_000
# How long a process waits for another's write to the cache (SQLite's busy timeout).
_BUSY_S = 30.0
# Files up to this size are read whole (larger ones in chunks).
_WHOLE_READ = 1 << 20
# Inodes per lookup query (below SQLite's oldest limit of 999 bound parameters).
_CHUNK = 500
# (A cache written before the change time was kept holds a table ``file_digests``: never read.)
_SCHEMA = ("CREATE TABLE IF NOT EXISTS file_digests_2 (ino INTEGER NOT NULL, dev INTEGER NOT NULL, "
           "size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, "
           "PRIMARY KEY (ino, dev)) WITHOUT ROWID")
# A whole source's answer, kept under the signature of its listing (every path and its stat), so that
# an unchanged glob of many files costs its stats and one row, not a row per file.
_LISTINGS = ("CREATE TABLE IF NOT EXISTS listings (spec TEXT PRIMARY KEY, signature TEXT NOT NULL, "
             "digests TEXT NOT NULL, fingerprint TEXT NOT NULL)")


def listing_signature(paths: Sequence[str], stats: Sequence[os.stat_result]) -> str:
    """A digest of a listing: each path with the (device, inode, size, mtime_ns, ctime_ns) ``stat`` gave it."""
    numbers = array.array("Q")
    for st in stats:
        numbers.extend((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    digest = hashlib.sha256("\n".join(paths).encode("utf-8", "surrogateescape"))
    digest.update(numbers.tobytes())
    return digest.hexdigest()


def _settled(st: os.stat_result, stat_time_ns: int) -> bool:
    """Whether a file was last modified long enough before it was stat'ed to be remembered (its
    change time, also in the key, may be recent: a file whose modification time was put back)."""
    return st.st_mtime_ns < stat_time_ns - _RACY_NS


def trusted(stats: Sequence[os.stat_result], stat_time_ns: int) -> bool:
    """Whether every file was last modified long enough before it was stat'ed to be remembered."""
    return all(_settled(st, stat_time_ns) for st in stats)


def _signed(value: int) -> int:
    """``value`` as SQLite's signed 64-bit integer (inode and device numbers are unsigned)."""
    return value - (1 << 64) if value >= (1 << 63) else value


def _read_sha256(path: str, size: int) -> str:
    # A small file in one read of its size: twice as fast as file_digest's 256 KiB buffer per file.
    with open(path, "rb", buffering=0) as f:
        if size <= _WHOLE_READ:
            return hashlib.sha256(f.read()).hexdigest()
        return hashlib.file_digest(f, "sha256").hexdigest()


class StatCache:
    """A persistent map (device, inode, size, mtime_ns, ctime_ns) → SHA-256 of a local file's content.

    Safe for threads and for processes sharing one file. Use it as a context manager, or
    :meth:`close` it.

    Args:
        path: the SQLite file (its folder is created), or ``":memory:"`` for one that lives as
            long as this object.

    Raises:
        OSError, sqlite3.Error: the file cannot be created or written.
    """

    def __init__(self, path: str):
        # Imported here: `import sqlite3` costs about 9 ms (measured), paid only by a process that
        # fingerprints local files, not by every `marin` command.
        import sqlite3

        self.path = path
        self.reads = 0
        """How many files this instance has read (the rest came from the cache)."""
        self.listing_hits = 0
        """How many sources this instance answered from a remembered listing (:meth:`listing`)."""
        self._lock = threading.Lock()
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._db = sqlite3.connect(path, timeout=_BUSY_S, isolation_level=None, check_same_thread=False)
        try:
            self._use_wal()
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            self._db.execute(_LISTINGS)
        except sqlite3.Error:
            self._db.close()
            raise

    def _use_wal(self) -> None:
        # Switching a file to write-ahead logging does not wait for the busy timeout: a process that
        # opens the cache while another is switching it gets "database is locked" at once (seen with
        # two processes starting together). The mode is kept in the file, so it is asked first and
        # set only when it is not WAL yet, trying again until the busy timeout.
        import sqlite3  # see __init__

        deadline = time.monotonic() + _BUSY_S
        while True:
            try:
                if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def digest(self, path: str) -> str:
        """The SHA-256 (hex) of the file at ``path``: remembered when its stat is unchanged, else read.

        Raises:
            OSError: the file cannot be stat'ed or read.
        """
        return self.digests([path])[0]

    def digests(self, paths: Sequence[str]) -> list[str]:
        """:meth:`digest` of each of ``paths``, with one lookup and one write for them all."""
        now = time.time_ns()
        return self.digests_of(paths, [os.stat(p) for p in paths], now)

    def digests_of(self, paths: Sequence[str], stats: Sequence[os.stat_result], stat_time_ns: int) -> list[str]:
        """:meth:`digests` for files the caller has just stat'ed.

        Args:
            stats: ``os.stat`` of each path (following links).
            stat_time_ns: ``time.time_ns()`` taken before those stats.
        """
        known = self._lookup(stats)
        found: dict[int, str] = {}
        for i, st in enumerate(stats):
            row = known.get((_signed(st.st_ino), _signed(st.st_dev)))
            if row is not None and row[:3] == (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                found[i] = row[3]
        fresh = {i: _read_sha256(paths[i], stats[i].st_size) for i in range(len(paths)) if i not in found}
        self.reads += len(fresh)
        self._store([(stats[i], sha) for i, sha in fresh.items() if _settled(stats[i], stat_time_ns)])
        found.update(fresh)
        return [found[i] for i in range(len(paths))]

    def listing(self, spec: str, signature: str) -> tuple[list[str], str] | None:
        """The per-file digests (in listing order) and fingerprint remembered for ``spec`` when its
        listing had ``signature`` (:func:`listing_signature`); None when it had another."""
        with self._lock:
            row = self._db.execute("SELECT signature, digests, fingerprint FROM listings WHERE spec = ?",
                                   (spec,)).fetchone()
        if row is None or row[0] != signature:
            return None
        self.listing_hits += 1
        return row[1].split(","), row[2]

    def remember_listing(self, spec: str, signature: str, digests: Sequence[str], fingerprint: str) -> None:
        """Keep ``spec``'s answer under its listing's signature; call it only for a :func:`trusted` listing."""
        self._write("INSERT OR REPLACE INTO listings VALUES (?, ?, ?, ?)",
                    [(spec, signature, ",".join(digests), fingerprint)])

    def _lookup(self, stats: Sequence[os.stat_result]) -> dict[tuple[int, int], tuple[int, int, int, str]]:
        inodes = sorted({_signed(st.st_ino) for st in stats})
        known: dict[tuple[int, int], tuple[int, int, int, str]] = {}
        with self._lock:
            for start in range(0, len(inodes), _CHUNK):
                chunk = inodes[start:start + _CHUNK]
                query = ("SELECT ino, dev, size, mtime_ns, ctime_ns, sha256 FROM file_digests_2 WHERE ino IN "
                         f"({','.join('?' * len(chunk))})")
                for ino, dev, size, mtime_ns, ctime_ns, sha in self._db.execute(query, chunk):
                    known[(ino, dev)] = (size, mtime_ns, ctime_ns, sha)
        return known

    def _store(self, rows: Sequence[tuple[os.stat_result, str]]) -> None:
        if not rows:
            return
        values = [(_signed(st.st_ino), _signed(st.st_dev), st.st_size, st.st_mtime_ns, st.st_ctime_ns, sha)
                  for st, sha in rows]
        self._write("INSERT OR REPLACE INTO file_digests_2 VALUES (?, ?, ?, ?, ?, ?)", values)

    def _write(self, statement: str, values: Sequence[tuple[Any, ...]]) -> None:
        import sqlite3  # see __init__

        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(statement, values)
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as e:
                # The cache only saves reading: a write it cannot make (disk full, locked for longer
                # than the busy timeout) costs a read next time, never a wrong digest.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                logger.warning("stat cache %s: could not remember %d rows (%s)", self.path, len(values), e)

    def close(self) -> None:
        """Close the database (what was read is already written)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> StatCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def stat_cache_path() -> str:
    """Where the stat cache lives: ``MARIN_STAT_CACHE``, else under ``XDG_CACHE_HOME`` or ``~/.cache``."""
    if os.environ.get("MARIN_STAT_CACHE"):
        return os.path.expanduser(os.environ["MARIN_STAT_CACHE"])
    return os.path.join(user_cache_folder(), "stat-cache.sqlite")


def default_stat_cache() -> StatCache:
    """The user's stat cache (:func:`stat_cache_path`); one in memory where that cannot be opened
    (a read-only home), so fingerprinting works everywhere and only re-reads more."""
    import sqlite3

    path = stat_cache_path()
    try:
        return StatCache(path)
    except (OSError, sqlite3.Error) as e:
        logger.warning("stat cache %s cannot be opened (%s); remembering digests for this process only", path, e)
        return StatCache(":memory:")
