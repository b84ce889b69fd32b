"""Local files, folders and globs, and Hugging Face ids, fingerprinted by content (DESIGN: "What
enters from outside is fingerprinted")."""

from __future__ import annotations

import glob
import hashlib
import http.server
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marin.execution.store.sources import (
    FileChanges,
    SourceFingerprint,
    SourceUnavailable,
    StatCache,
    diff_files,
    fingerprint_source,
    fingerprint_sources,
)
from testsupport.hub_cache import jsonl_bytes, stories, write_hub_dataset

HOUR_NS = 3600 * 10**9


def _age(*paths: Path) -> None:
    """Date files an hour back, so the stat cache trusts what it reads of them (it does not trust a
    file modified in the last seconds: a write in the same clock tick would keep its mtime)."""
    for path in paths:
        mtime = time.time_ns() - HOUR_NS
        os.utime(path, ns=(mtime, mtime))


def _corpus(root: Path) -> Path:
    """``root/src`` with three JSON-lines files, one in a subfolder, and hidden files and folders."""
    src = root / "src"
    (src / "more").mkdir(parents=True)
    (src / ".cache").mkdir()
    for name, text in (("d1.jsonl", "one"), ("d2.jsonl", "two"), ("more/d3.jsonl", "three"),
                       (".hidden", "no"), (".cache/x.jsonl", "no")):
        (src / name).write_text(f'{{"text": "{text}"}}\n')
    _age(*(p for p in src.rglob("*") if p.is_file()))
    return src


@pytest.fixture
def cache(tmp_path: Path) -> StatCache:
    with StatCache(str(tmp_path / "stat-cache.sqlite")) as opened:
        yield opened


def test_a_folder_is_its_visible_files_by_content_wherever_it_is(tmp_path: Path, cache: StatCache) -> None:
    src = _corpus(tmp_path)
    found = fingerprint_source(str(src), stat_cache=cache)
    assert found.kind == "local" and found.revision is None and found.commit is None
    assert found.file_map() == {name: hashlib.sha256((src / name).read_bytes()).hexdigest()
                                for name in ("d1.jsonl", "d2.jsonl", "more/d3.jsonl")}
    assert [name for name, _ in found.files] == sorted(found.file_map())
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(src, moved)
    again = fingerprint_source(str(moved) + "/", stat_cache=cache)
    assert again.digest == found.digest and again.spec != found.spec  # the spec is not in the digest
    assert fingerprint_source("file://" + str(src), stat_cache=cache).digest == found.digest
    single = fingerprint_source(str(src / "more" / "d3.jsonl"), stat_cache=cache)
    assert single.files == (("d3.jsonl", found.file_map()["more/d3.jsonl"]),)


def test_a_changed_byte_an_added_or_a_removed_file_changes_the_digest(tmp_path: Path, cache: StatCache) -> None:
    src = _corpus(tmp_path)
    spec = str(src / "**" / "*.jsonl")
    first = fingerprint_source(spec, stat_cache=cache)
    (src / "d1.jsonl").write_text('{"text": "onE"}\n')
    changed = fingerprint_source(spec, stat_cache=cache)
    (src / "d4.jsonl").write_text("{}\n")
    added = fingerprint_source(spec, stat_cache=cache)
    (src / "d2.jsonl").unlink()
    removed = fingerprint_source(spec, stat_cache=cache)
    assert len({first.digest, changed.digest, added.digest, removed.digest}) == 4
    assert diff_files(first.file_map(), changed.file_map()) == FileChanges(changed=("d1.jsonl",))
    both = diff_files(changed.file_map(), removed.file_map())
    assert both == FileChanges(added=("d4.jsonl",), removed=("d2.jsonl",))
    assert both.describe() == "1 file added (d4.jsonl), 1 removed (d2.jsonl)"
    assert diff_files(first.file_map(), first.file_map()).describe() == ""


def test_touching_a_file_reads_it_again_and_keeps_its_fingerprint(tmp_path: Path, cache: StatCache) -> None:
    src = _corpus(tmp_path)
    first = fingerprint_source(str(src), stat_cache=cache)
    assert cache.reads == 3
    assert fingerprint_source(str(src), stat_cache=cache) == first and cache.reads == 3
    os.utime(src / "d2.jsonl", ns=(time.time_ns() - 2 * HOUR_NS, time.time_ns() - 2 * HOUR_NS))
    assert fingerprint_source(str(src), stat_cache=cache) == first and cache.reads == 4


def test_an_unchanged_source_is_answered_by_its_remembered_listing_and_any_change_is_not(
        tmp_path: Path, cache: StatCache) -> None:
    src = _corpus(tmp_path)
    first = fingerprint_source(str(src), stat_cache=cache)
    assert cache.listing_hits == 0 and cache.reads == 3
    assert fingerprint_source(str(src), stat_cache=cache) == first and cache.listing_hits == 1
    old = time.time_ns() - 2 * HOUR_NS
    (src / "d2.jsonl").write_text("another line\n")
    os.utime(src / "d2.jsonl", ns=(old, old))
    second = fingerprint_source(str(src), stat_cache=cache)  # another stat: not the remembered listing
    assert cache.listing_hits == 1 and cache.reads == 4 and second.digest != first.digest
    assert dict(second.files)["d2.jsonl"] == hashlib.sha256(b"another line\n").hexdigest()
    (src / "d9.jsonl").write_text("new\n")
    os.utime(src / "d9.jsonl", ns=(old, old))
    third = fingerprint_source(str(src), stat_cache=cache)
    assert cache.listing_hits == 1 and "d9.jsonl" in dict(third.files)
    assert fingerprint_source(str(src), stat_cache=cache) == third and cache.listing_hits == 2
    # A listing with a file modified just now is not remembered (its stat could hide a rewrite).
    (src / "d9.jsonl").write_text("newer\n")
    fingerprint_source(str(src), stat_cache=cache)
    fingerprint_source(str(src), stat_cache=cache)
    assert cache.listing_hits == 2


def test_a_file_rewritten_in_the_clock_tick_it_was_read_in_is_not_trusted(tmp_path: Path, cache: StatCache) -> None:
    data = tmp_path / "fresh.jsonl"
    data.write_text("aaaa\n")
    first = fingerprint_source(str(data), stat_cache=cache)
    before = data.stat()
    data.write_text("bbbb\n")  # same size; the same mtime, as a coarse clock would stamp it
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    second = fingerprint_source(str(data), stat_cache=cache)
    assert second.digest != first.digest and cache.reads == 2


def _files_of(match: str) -> list[str]:
    """A file glob.glob matched, or the visible files below a folder it matched."""
    if not os.path.isdir(match):
        return [match]
    return [os.path.join(folder, name) for folder, dirs, names in os.walk(match)
            if not any(part.startswith(".") for part in os.path.relpath(folder, match).split(os.sep) if part != ".")
            for name in names if not name.startswith(".")]


def test_globs_pick_what_glob_glob_picks_and_the_files_of_folders_it_picks(tmp_path: Path, cache: StatCache, monkeypatch: pytest.MonkeyPatch) -> None:
    _corpus(tmp_path)
    (tmp_path / "src" / "d1.txt").write_text("t\n")
    (tmp_path / "src" / "more" / "deeper").mkdir()
    (tmp_path / "src" / "more" / "deeper" / "d5.jsonl").write_text("5\n")
    monkeypatch.chdir(tmp_path)
    for pattern in ("src/*.jsonl", "src/**/*.jsonl", "src/d[12].*", "src/d?.jsonl", "src/[!d]*/**",
                    "src/**/d[!1]*", "src/.*", "*/more/*/*.jsonl", "src/**"):
        expected = sorted({f for match in glob.glob(pattern, recursive=True) for f in _files_of(match)})
        found = fingerprint_source(pattern, stat_cache=cache)
        base = pattern.split("/")[0] if "*" not in pattern.split("/")[0] else ""
        assert [os.path.join(base, name) for name, _ in found.files] == expected, pattern


def test_a_matched_folder_brings_its_files_and_a_symlink_loop_is_entered_once(tmp_path: Path,
                                                                              cache: StatCache) -> None:
    src = _corpus(tmp_path)
    (src / "more" / "loop").symlink_to("..", target_is_directory=True)
    (tmp_path / "linked").symlink_to(src / "more", target_is_directory=True)
    assert [n for n, _ in fingerprint_source(str(src / "mo*"), stat_cache=cache).files] == ["more/d3.jsonl"]
    assert [n for n, _ in fingerprint_source(str(src), stat_cache=cache).files] == [
        "d1.jsonl", "d2.jsonl", "more/d3.jsonl"]
    assert [n for n, _ in fingerprint_source(str(tmp_path / "linked"), stat_cache=cache).files] == [
        "d3.jsonl", "loop/d1.jsonl", "loop/d2.jsonl"]


def test_a_source_that_matches_nothing_or_cannot_be_read_is_named(tmp_path: Path, cache: StatCache) -> None:
    src = _corpus(tmp_path)
    with pytest.raises(SourceUnavailable, match=r"^source '.*/src/\*\.parquet' matches no file$"):
        fingerprint_source(str(src / "*.parquet"), stat_cache=cache)
    with pytest.raises(SourceUnavailable, match=r"^source '.*/absent' matches no file$"):
        fingerprint_source(str(tmp_path / "absent"), stat_cache=cache)
    (src / "broken.jsonl").symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(SourceUnavailable, match=r"^source '.*/src': .*/src/broken\.jsonl cannot be read \(No such"):
        fingerprint_source(str(src), stat_cache=cache)
    with pytest.raises(SourceUnavailable, match="is neither an existing path, a URL, nor a Hugging Face id"):
        fingerprint_source("not a source", stat_cache=cache)
    with pytest.raises(SourceUnavailable, match="a revision .* applies to Hugging Face ids only"):
        fingerprint_source(str(src), "v1", stat_cache=cache)


def test_fingerprints_and_file_changes_read_back_and_describe_themselves() -> None:
    found = SourceFingerprint("data/*.jsonl", None, "local", "ab" * 32, (("a.jsonl", "1"), ("b.jsonl", "2")))
    assert SourceFingerprint.from_json(found.to_json()) == found
    hub = SourceFingerprint("org/name", "v2", "hub", "cd" * 32, (), "0" * 40)
    assert SourceFingerprint.from_json(hub.to_json()) == hub and hub.file_map() == {}
    with pytest.raises(ValueError, match="not a source fingerprint"):
        SourceFingerprint.from_json({"spec": "x", "kind": "tape"})
    many = diff_files({"a": "1", "b": "1"}, {f"n{i}": "1" for i in range(5)} | {"a": "2"})
    assert many.describe() == "5 files added (n0, n1, n2, ...), 1 changed (a), 1 removed (b)"
    assert many.describe(limit=1) == "5 files added (n0, ...), 1 changed (a), 1 removed (b)"


@pytest.fixture
def hub_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf"


def test_a_hub_id_offline_is_its_cached_commit_and_moving_main_changes_it(hub_home: Path) -> None:
    old, new = "1" * 40, "2" * 40
    write_hub_dataset(hub_home, "org/stories", {"train.jsonl": jsonl_bytes(stories(3, seed=1))}, revision=old)
    first = fingerprint_source("org/stories")
    assert (first.kind, first.commit, first.files, first.revision) == ("hub", old, (), None)
    write_hub_dataset(hub_home, "org/stories", {"train.jsonl": jsonl_bytes(stories(3, seed=2))}, revision=new)
    moved = fingerprint_source("org/stories")
    assert moved.commit == new and moved.digest != first.digest
    pinned = fingerprint_sources([("org/stories", old), ("org/stories", None)])
    assert pinned[("org/stories", old)].digest == first.digest and pinned[("org/stories", None)] == moved
    (hub_home / "hub" / "datasets--org--stories" / "refs" / "v1").write_text(old)
    assert fingerprint_source("org/stories", "v1").commit == old


def test_a_hub_id_not_in_the_cache_offline_names_the_id_and_the_cache_folder(hub_home: Path) -> None:
    folder = hub_home / "hub" / "datasets--org--absent"
    with pytest.raises(SourceUnavailable) as info:
        fingerprint_source("org/absent")
    message = str(info.value)
    assert message.startswith("source 'org/absent' is a Hugging Face dataset id whose revision 'main' is not")
    assert f"({folder} has no refs/main)" in message and "HF_HUB_OFFLINE=1" in message and "\n" not in message
    write_hub_dataset(hub_home, "org/absent", {"a.jsonl": b"{}\n"}, revision="3" * 40)
    with pytest.raises(SourceUnavailable, match=r"revision 'v9' is not in the hub cache"):
        fingerprint_source("org/absent", "v9")


@pytest.fixture
def online(hub_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """HF_HUB_OFFLINE unset, also for a huggingface_hub that an earlier test imported while it was
    set (the library reads it once, at import, into the sessions it makes)."""
    import huggingface_hub.constants
    from huggingface_hub.utils import reset_sessions

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    reset_sessions()
    yield
    monkeypatch.undo()
    reset_sessions()


def test_a_hub_that_cannot_be_reached_leaves_the_answer_to_the_cache_and_says_so(
        hub_home: Path, online: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from testsupport.net import LOOPBACK, free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://{LOOPBACK}:{free_port(LOOPBACK)}")  # nothing listens there
    write_hub_dataset(hub_home, "org/stories", {"train.jsonl": b"{}\n"}, revision="4" * 40)
    ref = hub_home / "hub" / "datasets--org--stories" / "refs" / "main"
    os.utime(ref, (time.time() - 3 * 86400 - 60, time.time() - 3 * 86400 - 60))
    with caplog.at_level(logging.WARNING, logger="marin.execution.store.hub_sources"):
        assert fingerprint_source("org/stories").commit == "4" * 40
    # Said, naming the commit used and how old the cache's record of it is.
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("source 'org/stories': the Hugging Face Hub could not be reached (ConnectionError")
    assert f"using commit {'4' * 40} of revision 'main' from the hub cache, written 3 days ago" in warning
    with pytest.raises(SourceUnavailable, match=r"and the Hub could not be asked \(.*Error"):
        fingerprint_source("org/elsewhere")


class _Hub(http.server.BaseHTTPRequestHandler):
    """Answers ``/api/datasets/<org>/<name>/revision/<revision>`` as the Hub does: the dataset's
    commit, 404 with the Hub's ``X-Error-Code`` for a dataset it does not have, and for the
    datasets of ``refusals`` that status (a 401 as the Hub answers a token it does not accept)."""

    commits = {("org/stories", "main"): "5" * 40}
    refusals = {"org/expired": 401, "org/forbidden": 403, "org/busy": 503}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        match = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/revision/([^/?]+)(?:\?.*)?", self.path)
        repo_id, revision = (match[1], match[2]) if match else ("", "")
        commit = self.commits.get((repo_id, revision))
        status = 200 if commit else self.refusals.get(repo_id, 404)
        body = json.dumps({"id": repo_id, "sha": commit} if commit else {"error": "no"}).encode()
        self.send_response(status)
        if status == 404:
            self.send_header("X-Error-Code", "RepoNotFound")
        if status == 401:
            self.send_header("X-Error-Message", "Invalid credentials in Authorization header")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub_server(online: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Hub on 127.0.0.1 (:class:`_Hub`), as ``HF_ENDPOINT``."""
    from testsupport.net import LOOPBACK

    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://{LOOPBACK}:{server.server_address[1]}")
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_online_a_hub_id_is_the_commit_the_hub_names(hub_home: Path, hub_server: None) -> None:
    write_hub_dataset(hub_home, "org/stories", {"train.jsonl": b"{}\n"}, revision="6" * 40)  # older, cached
    assert fingerprint_source("org/stories").commit == "5" * 40
    with pytest.raises(SourceUnavailable, match=r"^source 'org/gone': the Hugging Face Hub has no dataset"):
        fingerprint_source("org/gone")


def test_a_token_the_hub_refuses_is_an_error_never_the_cached_commit(hub_home: Path, hub_server: None,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    for repo_id in ("org/expired", "org/forbidden", "org/busy"):
        write_hub_dataset(hub_home, repo_id, {"train.jsonl": b"{}\n"}, revision="7" * 40)
    for repo_id, status in (("org/expired", "401 Unauthorized"), ("org/forbidden", "403 Forbidden")):
        with pytest.raises(SourceUnavailable) as refused:
            fingerprint_source(repo_id)
        message = str(refused.value)
        assert message.startswith(f"source {repo_id!r}: the Hugging Face Hub refused to say which commit revision "
                                  f"'main' is ({status}): the token (HF_TOKEN")
        assert "\n" not in message
    # A Hub that cannot answer now (503) is like no network: the cache answers, and says so.
    with caplog.at_level(logging.WARNING, logger="marin.execution.store.hub_sources"):
        assert fingerprint_source("org/busy").commit == "7" * 40
    assert any("using commit " + "7" * 40 in r.getMessage() and "503" in r.getMessage() for r in caplog.records)
