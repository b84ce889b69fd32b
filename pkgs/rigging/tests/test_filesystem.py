"""Contract suite for ``rigging.filesystem``: every test runs on local, memory:// and gs:// stores.

gs:// is two real emulators (see the root conftest): ``gcp-storage-emulator``, which does not
enforce ``ifGenerationMatch=0``, and ``fake-gcs-server``, which does on the multipart uploads
``create_if_absent`` sends. Real GCS enforces the precondition on every upload (an object insert
with ``ifGenerationMatch=0`` succeeds only if no live generation exists, else 412), which is all
the code relies on. So the exactly-one-winner race of ``create_if_absent`` is proven on local
(several processes), memory:// (many threads) and fake-gcs-server (threads and processes); on
``gcp-storage-emulator`` we still check that an existing object is never replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from gcsfs.core import GCSFileSystem

from rigging import filesystem as rfs
from rigging import gcs


def _root(store_url: str) -> str:
    # A fresh folder per test below the store, so tests never see each other's files.
    return rfs.join(store_url, f"t-{uuid.uuid4().hex[:12]}")


# ---------------------------------------------------------------- round trips


def test_write_read_round_trip_bytes_and_text(store_url):
    root = _root(store_url)
    blob = bytes(range(256)) * 3
    rfs.atomic_write(rfs.join(root, "deep/er/blob.bin"), blob)
    rfs.atomic_write(rfs.join(root, "text.txt"), "héllo wörld\n")
    assert rfs.read_bytes(rfs.join(root, "deep/er/blob.bin")) == blob
    assert rfs.read_text(rfs.join(root, "text.txt")) == "héllo wörld\n"
    assert rfs.size(rfs.join(root, "deep/er/blob.bin")) == len(blob)
    assert rfs.size(rfs.join(root, "text.txt")) == len("héllo wörld\n".encode())


def test_open_file_round_trip(store_url):
    root = _root(store_url)
    path = rfs.join(root, "sub/streamed.txt")
    with rfs.open_file(path, "wb") as f:
        f.write(b"line 1\n")
        f.write(b"line 2\n")
    with rfs.open_file(path, "rb") as f:
        assert f.read() == b"line 1\nline 2\n"
    with rfs.open_file(path, "r") as f:
        assert f.read().splitlines() == ["line 1", "line 2"]


def test_open_readers_are_independent(store_url):
    """Two open handles on one file keep their own positions (memory:// shares one by default)."""
    path = rfs.join(_root(store_url), "shared.txt")
    rfs.atomic_write(path, b"0123456789")
    with rfs.open_file(path) as first, rfs.open_file(path) as second:
        assert first.read(4) == b"0123"
        assert second.read() == b"0123456789"
        assert first.read() == b"456789"


def test_empty_file_round_trip(store_url):
    path = rfs.join(_root(store_url), "empty")
    rfs.atomic_write(path, b"")
    assert rfs.exists(path)
    assert rfs.read_bytes(path) == b""
    assert rfs.size(path) == 0


def test_read_missing_file_raises_file_not_found(store_url):
    with pytest.raises(FileNotFoundError):
        rfs.read_bytes(rfs.join(_root(store_url), "nope.txt"))


def test_sha256_of_streams_the_whole_file(store_url):
    import hashlib

    path = rfs.join(_root(store_url), "blob")
    data = os.urandom(3 << 20) + b"tail"  # more than one read buffer
    rfs.atomic_write(path, data)
    assert rfs.sha256_of(path) == hashlib.sha256(data).hexdigest()
    with pytest.raises(FileNotFoundError):
        rfs.sha256_of(rfs.join(_root(store_url), "nope"))


def test_sha256_of_a_file_of_known_size_reads_it_in_ranges(store_url, monkeypatch):
    import hashlib

    monkeypatch.setattr(gcs, "DIGEST_CHUNK", 1 << 20)
    path = rfs.join(_root(store_url), "blob")
    data = os.urandom(3 << 20) + b"tail"  # four ranges of at most 1 MiB
    rfs.atomic_write(path, data)
    assert rfs.sha256_of(path, size=len(data)) == hashlib.sha256(data).hexdigest()
    empty = rfs.join(_root(store_url), "empty")
    rfs.atomic_write(empty, b"")
    assert rfs.sha256_of(empty, size=0) == hashlib.sha256(b"").hexdigest()


# ---------------------------------------------------------------- atomic_write


def test_atomic_write_overwrites_and_leaves_no_temporaries(store_url):
    root = _root(store_url)
    path = rfs.join(root, "record.json")
    rfs.atomic_write(path, b"first, and longer than the second")
    rfs.atomic_write(path, b"second")
    assert rfs.read_bytes(path) == b"second"
    assert rfs.size(path) == len(b"second")
    assert rfs.listdir(root) == ["record.json"]
    assert rfs.walk_files(root) is not None
    assert list(rfs.walk_files(root)) == [("record.json", 6)]


def test_atomic_write_readers_never_see_partial_content(store_url):
    """A writer alternates two payloads of different sizes; concurrent readers see one or the other."""
    path = rfs.join(_root(store_url), "hot.bin")
    small, large = b"a" * 50_000, b"b" * 200_000
    rfs.atomic_write(path, small)
    stop = threading.Event()
    seen: list[bytes] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            i = 0
            while not stop.is_set():
                rfs.atomic_write(path, large if i % 2 else small)
                i += 1
        except BaseException as e:  # noqa: BLE001  (reported by the assertion below)
            errors.append(e)

    def read() -> None:
        try:
            while not stop.is_set():
                seen.append(rfs.read_bytes(path))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.6)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(seen) >= 3
    torn = [len(s) for s in seen if s not in (small, large)]
    assert not torn, f"{len(torn)} of {len(seen)} reads saw partial content, sizes {torn[:5]}"
    assert rfs.read_bytes(path) in (small, large)


# ---------------------------------------------------------------- create_if_absent


def test_create_if_absent_never_replaces_an_existing_object(store_url):
    path = rfs.join(_root(store_url), "locks/lease.json")
    assert rfs.create_if_absent(path, b"mine") is True
    assert rfs.create_if_absent(path, b"yours") is False
    assert rfs.read_bytes(path) == b"mine"
    rfs.atomic_write(path, "overwritten")
    assert rfs.create_if_absent(path, "again") is False
    assert rfs.read_text(path) == "overwritten"
    rfs.delete(path)
    assert not rfs.exists(path)
    assert rfs.create_if_absent(path, "after delete") is True
    assert rfs.read_text(path) == "after delete"


def test_create_if_absent_leaves_no_temporaries(store_url):
    root = _root(store_url)
    rfs.create_if_absent(rfs.join(root, "x"), b"1")
    rfs.create_if_absent(rfs.join(root, "x"), b"2")
    assert rfs.listdir(root) == ["x"]


# Each process waits for all the others before every attempt, so all of them race for each path.
_CREATOR = r"""
import os, sys, time
from rigging.filesystem import create_if_absent, join
root, me, meet, n, n_procs, listed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
for i in range(n):
    here = os.path.join(meet, str(i))
    os.makedirs(here, exist_ok=True)
    open(os.path.join(here, me), "w").close()
    deadline = time.monotonic() + 30
    while len(os.listdir(here)) < n_procs and time.monotonic() < deadline:
        time.sleep(0.0005)  # a spin that leaves the cores to the store's server and the other racers
    if create_if_absent(join(root, f"lease-{i}"), me, listed_absent=listed == "listed"):
        print(i, flush=True)
"""


def _race_processes(root: str, meet: str, n_procs: int, n_paths: int, *, listed_absent: bool) -> None:
    """``n_procs`` processes race for each of ``n_paths`` paths under ``root``: exactly one wins each,
    and what the path holds is the winner's."""
    args = [root, "", meet, str(n_paths), str(n_procs), "listed" if listed_absent else "look"]
    procs = []
    for k in range(n_procs):
        args[1] = f"proc-{k}"
        procs.append(subprocess.Popen([sys.executable, "-c", _CREATOR, *args], stdout=subprocess.PIPE, text=True))
    won: dict[int, list[str]] = {}
    for k, p in enumerate(procs):
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        for line in out.split():
            won.setdefault(int(line), []).append(f"proc-{k}")
    assert sorted(won) == list(range(n_paths))
    assert {i: len(w) for i, w in won.items() if len(w) != 1} == {}
    for i, (winner,) in won.items():
        assert rfs.read_text(rfs.join(root, f"lease-{i}")) == winner
    assert rfs.listdir(root) == sorted(f"lease-{i}" for i in range(n_paths))


def test_create_if_absent_single_winner_across_processes(tmp_path):
    _race_processes(str(tmp_path / "locks"), str(tmp_path / "meet"), 4, 30, listed_absent=False)


def test_create_if_absent_single_winner_across_processes_on_strict_gcs(strict_gcs_bucket, tmp_path):
    """Processes with their own gcsfs clients race on fake-gcs-server, none looking before its
    upload: its precondition check, as real GCS's, refuses every upload but one."""
    _race_processes(_root(strict_gcs_bucket), str(tmp_path / "meet"), 3, 25, listed_absent=True)


def _race_threads(root: str, n_threads: int, n_paths: int, *, listed_absent: bool = False) -> None:
    """``n_threads`` threads of this process race for each of ``n_paths`` paths under ``root``."""
    barrier = threading.Barrier(n_threads)
    wins: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def creator(me: str) -> None:
        try:
            for i in range(n_paths):
                barrier.wait(timeout=30)  # every thread races for every path at once
                if rfs.create_if_absent(rfs.join(root, f"lease-{i}"), me, listed_absent=listed_absent):
                    wins.append((i, me))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible to expose check-then-write
    try:
        threads = [threading.Thread(target=creator, args=(f"t{k}",)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert sorted(i for i, _ in wins) == list(range(n_paths)), "some path had zero or several winners"
    for i, me in wins:
        assert rfs.read_text(rfs.join(root, f"lease-{i}")) == me


def test_create_if_absent_single_winner_across_threads_memory(memory_prefix):
    _race_threads(memory_prefix, 8, 150)


def test_create_if_absent_single_winner_across_threads_on_strict_gcs(strict_gcs_bucket):
    """Threads share one gcsfs client, whose event loop sends their uploads concurrently; the
    precondition (real GCS: ``ifGenerationMatch=0`` on insert) leaves one winner per path."""
    _race_threads(_root(strict_gcs_bucket), 8, 60, listed_absent=True)


# ---------------------------------------------------------------- exists / delete


def test_exists_for_files_folders_and_missing(store_url):
    root = _root(store_url)
    assert not rfs.exists(root)
    rfs.atomic_write(rfs.join(root, "a/b/c.txt"), b"x")
    assert rfs.exists(rfs.join(root, "a/b/c.txt"))
    assert rfs.exists(rfs.join(root, "a/b"))
    assert rfs.exists(rfs.join(root, "a"))
    assert not rfs.exists(rfs.join(root, "a/b/c.tx"))
    assert not rfs.exists(rfs.join(root, "a/b/c.txt/d"))
    rfs.delete(rfs.join(root, "a/b/c.txt"))
    assert not rfs.exists(rfs.join(root, "a/b/c.txt"))
    rfs.delete(rfs.join(root, "a/b/c.txt"))  # deleting a missing file is fine


def test_exists_sees_writes_by_another_client(gcs_bucket):
    """gcsfs caches listings; a write by another process must still be seen."""
    root = _root(gcs_bucket)
    path = rfs.join(root, "late.txt")
    assert not rfs.exists(path)
    assert rfs.listdir(root) == []
    other = GCSFileSystem(skip_instance_cache=True)  # stands in for another process
    other.pipe_file(rfs.strip_protocol(path), b"late and long")
    assert rfs.exists(path)
    assert rfs.listdir(root) == ["late.txt"]
    assert rfs.read_bytes(path) == b"late and long"
    assert rfs.glob(rfs.join(root, "*.txt")) == [path]
    other.pipe_file(rfs.strip_protocol(path), b"replaced by something longer still")
    assert rfs.size(path) == len(b"replaced by something longer still")
    assert rfs.read_bytes(path) == b"replaced by something longer still"
    with rfs.open_file(path) as f:
        assert f.read() == b"replaced by something longer still"
    assert list(rfs.walk_files(root)) == [("late.txt", 34)]
    other.rm_file(rfs.strip_protocol(path))
    assert not rfs.exists(path)
    assert rfs.create_if_absent(path, b"new") is True


# ---------------------------------------------------------------- glob / listdir / walk


def _populate(root: str) -> None:
    for name in ["b.txt", "a.txt", "c.json", "sub/d.txt", "sub/deeper/e.txt", "z/f.txt"]:
        rfs.atomic_write(rfs.join(root, name), name.encode())


def test_glob_is_sorted_and_keeps_the_protocol(store_url):
    root = _root(store_url)
    _populate(root)
    found = rfs.glob(rfs.join(root, "*.txt"))
    assert found == [rfs.join(root, "a.txt"), rfs.join(root, "b.txt")]
    assert all(rfs.protocol_of(f) == rfs.protocol_of(store_url) for f in found)
    nested = rfs.glob(rfs.join(root, "*/*.txt"))
    assert nested == [rfs.join(root, "sub/d.txt"), rfs.join(root, "z/f.txt")]
    # Every result can be handed back to the other helpers as is.
    assert [rfs.read_text(f) for f in nested] == ["sub/d.txt", "z/f.txt"]
    assert rfs.glob(rfs.join(root, "*.parquet")) == []
    assert rfs.glob(rfs.join(root, "nothing-here/*")) == []


def test_glob_recursive(store_url):
    root = _root(store_url)
    _populate(root)
    found = rfs.glob(rfs.join(root, "**/*.txt"))
    expected = [rfs.join(root, n) for n in ["a.txt", "b.txt", "sub/d.txt", "sub/deeper/e.txt", "z/f.txt"]]
    assert found == sorted(expected)


def test_listdir_names_only_sorted(store_url):
    root = _root(store_url)
    _populate(root)
    assert rfs.listdir(root) == ["a.txt", "b.txt", "c.json", "sub", "z"]
    assert rfs.listdir(root + "/") == ["a.txt", "b.txt", "c.json", "sub", "z"]
    assert rfs.listdir(rfs.join(root, "sub")) == ["d.txt", "deeper"]
    assert rfs.listdir(rfs.join(root, "missing")) == []


def test_walk_files_relative_names_and_sizes(store_url):
    root = _root(store_url)
    _populate(root)
    rows = list(rfs.walk_files(root))
    names = ["a.txt", "b.txt", "c.json", "sub/d.txt", "sub/deeper/e.txt", "z/f.txt"]
    assert rows == [(n, len(n)) for n in names]
    assert list(rfs.walk_files(root + "/")) == rows
    assert list(rfs.walk_files(rfs.join(root, "sub"))) == [("d.txt", 9), ("deeper/e.txt", 16)]
    assert list(rfs.walk_files(rfs.join(root, "a.txt"))) == []  # a file is not a folder
    assert list(rfs.walk_files(rfs.join(root, "missing"))) == []


def test_walk_files_does_not_match_sibling_prefixes(store_url):
    """``out/a`` must not list ``out/ab/...`` (object stores are flat key spaces)."""
    root = _root(store_url)
    rfs.atomic_write(rfs.join(root, "a/x"), b"1")
    rfs.atomic_write(rfs.join(root, "ab/y"), b"22")
    assert list(rfs.walk_files(rfs.join(root, "a"))) == [("x", 1)]
    assert rfs.listdir(rfs.join(root, "a")) == ["x"]


# ---------------------------------------------------------------- rm_tree


def test_rm_tree_removes_everything_below_and_nothing_beside(store_url):
    root = _root(store_url)
    _populate(root)
    rfs.atomic_write(rfs.join(root, "sub-sibling.txt"), b"keep")
    rfs.rm_tree(rfs.join(root, "sub"))
    assert not rfs.exists(rfs.join(root, "sub"))
    assert not rfs.exists(rfs.join(root, "sub/deeper/e.txt"))
    assert rfs.listdir(root) == ["a.txt", "b.txt", "c.json", "sub-sibling.txt", "z"]
    rfs.rm_tree(rfs.join(root, "sub"))  # already gone: not an error
    rfs.rm_tree(rfs.join(root, "a.txt"))  # a single file
    assert not rfs.exists(rfs.join(root, "a.txt"))
    rfs.rm_tree(root)
    assert not rfs.exists(root)
    assert list(rfs.walk_files(root)) == []


def test_rm_tree_many_files(store_url):
    root = _root(store_url)
    for i in range(50):
        rfs.atomic_write(rfs.join(root, f"shard-{i:04d}"), b"x")
    assert len(rfs.listdir(root)) == 50
    rfs.rm_tree(root)
    assert rfs.listdir(root) == []
    assert not rfs.exists(root)


# ---------------------------------------------------------------- path helpers


def test_protocol_helpers():
    assert rfs.protocol_of("gs://b/k") == "gs"
    assert rfs.protocol_of("memory://x") == "memory"
    assert rfs.protocol_of("/tmp/x") == "file"
    assert rfs.protocol_of("rel/x") == "file"
    assert rfs.is_local("file:///tmp/x") and rfs.is_local("/tmp/x")
    assert not rfs.is_local("gs://b/k")
    assert rfs.strip_protocol("gs://b/k") == "b/k"
    assert rfs.strip_protocol("file:///tmp/x") == "/tmp/x"
    assert rfs.join("gs://b/", "/x/", "", "y") == "gs://b/x/y"
    assert rfs.join("memory://r", "a") == "memory://r/a"


def test_relative_local_paths_are_used_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rfs.atomic_write("rel/a.txt", b"1")
    assert (tmp_path / "rel" / "a.txt").read_bytes() == b"1"
    assert rfs.exists("rel/a.txt")
    assert rfs.create_if_absent("rel/b.txt", b"2") is True
    assert rfs.listdir("rel") == ["a.txt", "b.txt"]
    assert list(rfs.walk_files("rel")) == [("a.txt", 1), ("b.txt", 1)]
    assert rfs.glob("rel/*.txt") == ["rel/a.txt", "rel/b.txt"]
    rfs.rm_tree("rel")
    assert not (tmp_path / "rel").exists()


def test_file_urls_keep_their_protocol(tmp_path):
    root = f"file://{tmp_path}/store"
    rfs.atomic_write(rfs.join(root, "a.txt"), b"1")
    assert rfs.read_bytes(rfs.join(root, "a.txt")) == b"1"
    assert rfs.glob(rfs.join(root, "*.txt")) == [rfs.join(root, "a.txt")]
    assert list(rfs.walk_files(root)) == [("a.txt", 1)]


def test_local_file_operations_never_import_fsspec(tmp_path):
    # Local paths go straight to the OS: a small local job (tokenizing the bundled corpus,
    # reading a cached step) does not pay for importing fsspec.
    script = """
import sys
from rigging import filesystem as fs
root = sys.argv[1]
for name in ("local-path", "file-url"):
    base = fs.join(root if name == "local-path" else "file://" + root, name)
    fs.makedirs(fs.join(base, "sub"))
    fs.atomic_write(fs.join(base, "sub/a.txt"), b"12")
    assert fs.create_if_absent(fs.join(base, "b.txt"), b"3")
    assert fs.read_bytes(fs.join(base, "sub/a.txt")) == b"12" and fs.read_text(fs.join(base, "b.txt")) == "3"
    assert fs.size(fs.join(base, "sub/a.txt")) == 2 and fs.exists(base)
    assert fs.listdir(base) == ["b.txt", "sub"] and fs.listdir(fs.join(base, "missing")) == []
    assert list(fs.walk_files(base)) == [("b.txt", 1), ("sub/a.txt", 2)]
    fs.delete(fs.join(base, "b.txt")); fs.delete(fs.join(base, "b.txt"))
    assert list(fs.walk_files(base)) == [("sub/a.txt", 2)]
    fs.rm_tree(base)
    assert not fs.exists(base)
assert "fsspec" not in sys.modules, "fsspec was imported"
"""
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
