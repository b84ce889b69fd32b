"""Conditional writes (``rigging.versioned``): a write lands only on the version it read, so
writers that read, change and write one record never lose one another's change; locally, in
memory and on fake-gcs-server (which enforces generation preconditions, as GCS does)."""

from __future__ import annotations

import json
import threading

import pytest

from rigging import filesystem as fs
from rigging.versioned import Versioned, read_versioned, write_if_unchanged


@pytest.fixture(params=["local", "memory", "gs"])
def folder(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "records")
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix")
    return request.getfixturevalue("strict_gcs_bucket") + "/records"


def test_a_write_lands_only_on_the_version_it_read(folder: str) -> None:
    path = fs.join(folder, "r.json")
    absent = read_versioned(path)
    assert absent == Versioned(None)
    assert write_if_unchanged(path, "one", absent)
    assert not write_if_unchanged(path, "again", absent)  # created meanwhile: not absent any more
    first = read_versioned(path)
    assert first.data == b"one"
    assert write_if_unchanged(path, "two", first)
    assert not write_if_unchanged(path, "stale", first)  # another write came in between
    assert fs.read_bytes(path) == b"two"
    second = read_versioned(path)
    assert second.data == b"two" and second.version != first.version
    assert write_if_unchanged(path, b"three", second) and fs.read_bytes(path) == b"three"


def test_concurrent_read_change_write_loses_nothing(folder: str) -> None:
    path = fs.join(folder, "list.json")
    writers, tries = 6, []
    everyone_read = threading.Barrier(writers)

    def add(item: int) -> None:
        first = True
        while True:
            seen = read_versioned(path)
            items = json.loads(seen.data) if seen.data is not None else []
            if first:  # all read the same version before any writes: all but one must try again
                everyone_read.wait()
                first = False
            tries.append(item)
            if write_if_unchanged(path, json.dumps(sorted([*items, item])), seen):
                return

    threads = [threading.Thread(target=add, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert json.loads(fs.read_bytes(path)) == list(range(writers))
    assert len(tries) >= 2 * writers - 1  # each loser of a round tried again
