"""The stat cache: a local file's SHA-256 read once, remembered across instances and processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marin.execution.store.sources import StatCache, default_stat_cache, fingerprint_source, stat_cache_path

_OLD_NS = time.time_ns() - 3600 * 10**9


def _old_files(folder: Path, n: int) -> list[str]:
    """``n`` files written an hour ago (the cache trusts only files not modified in the last seconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"part-{i:03d}.txt"
        path.write_text(f"line {i}\n" * (i + 1))
        os.utime(path, ns=(_OLD_NS, _OLD_NS))
        paths.append(str(path))
    return paths


def test_a_same_size_edit_with_its_modification_time_put_back_is_read_again(tmp_path: Path) -> None:
    [path] = _old_files(tmp_path / "data", 1)
    where = str(tmp_path / "cache" / "stat.sqlite")
    with StatCache(where) as cache:
        before = cache.digest(path)
    Path(path).write_text("LINE 0\n")  # the same size
    os.utime(path, ns=(_OLD_NS, _OLD_NS))  # `touch -d <old time>`, `cp -p`: only the change time tells
    with StatCache(where) as cache:
        after = cache.digest(path)
        assert cache.reads == 1
    assert after != before and after == hashlib.sha256(b"LINE 0\n").hexdigest()
    src = str(tmp_path / "data" / "*.txt")
    first = fingerprint_source(src, stat_cache=StatCache(where))
    Path(path).write_text("line 0\n")
    os.utime(path, ns=(_OLD_NS, _OLD_NS))
    assert fingerprint_source(src, stat_cache=StatCache(where)) != first


def test_digests_are_read_once_and_remembered_by_the_next_instance(tmp_path: Path) -> None:
    paths = _old_files(tmp_path / "data", 5)
    where = str(tmp_path / "cache" / "stat.sqlite")
    with StatCache(where) as first:
        digests = first.digests(paths)
        assert first.digest(paths[0]) == digests[0] and first.reads == 5
    assert digests == [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]
    with StatCache(where) as second:
        assert second.digests(paths) == digests and second.reads == 0
        Path(paths[1]).write_text("changed\n")  # a new mtime: a miss
        assert second.digest(paths[1]) == hashlib.sha256(b"changed\n").hexdigest() and second.reads == 1


_FILL = """
import sys
from marin.execution.store.sources import StatCache, fingerprint_source
with StatCache(sys.argv[1]) as cache:
    print(fingerprint_source(sys.argv[2], stat_cache=cache).digest, cache.reads)
"""


def test_processes_fill_one_cache_at_once_and_a_later_one_reads_nothing(tmp_path: Path) -> None:
    _old_files(tmp_path / "data", 40)
    where = str(tmp_path / "stat.sqlite")
    runs = [subprocess.Popen([sys.executable, "-c", _FILL, where, str(tmp_path / "data")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=60) for run in runs]
    answers = [out.split() for out, _err in outputs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _out, err in outputs]
    assert answers[0][0] == answers[1][0]
    with StatCache(where) as cache:
        assert fingerprint_source(str(tmp_path / "data"), stat_cache=cache).digest == answers[0][0]
        assert cache.reads == 0


def test_the_default_cache_is_found_by_env_and_falls_back_to_memory(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARIN_STAT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert stat_cache_path() == str(tmp_path / "home" / ".cache" / "marin" / "stat-cache.sqlite")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert stat_cache_path() == str(tmp_path / "xdg" / "marin" / "stat-cache.sqlite")
    monkeypatch.setenv("MARIN_STAT_CACHE", str(tmp_path / "mine.sqlite"))
    with default_stat_cache() as cache:
        assert cache.path == str(tmp_path / "mine.sqlite") and os.path.exists(cache.path)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("MARIN_STAT_CACHE", str(tmp_path / "a-file" / "stat.sqlite"))  # its folder is a file
    paths = _old_files(tmp_path / "data", 2)
    with default_stat_cache() as cache:
        assert cache.path == ":memory:"
        cache.digests(paths)
        cache.digests(paths)
        assert cache.reads == 2
