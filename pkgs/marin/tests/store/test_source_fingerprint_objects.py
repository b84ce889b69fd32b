"""Object-store sources fingerprinted from their listing (checksum and generation), on the GCS
emulators and ``memory://``: no downloads, one listing per prefix."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from marin.execution.store.object_sources import object_fingerprint
from marin.execution.store.sources import (
    SourceFingerprint,
    SourceUnavailable,
    fingerprint_source,
    fingerprint_sources,
)
from rigging import filesystem as fs
from testsupport.gcs import GcsEmulator, use_gcs_emulator
from testsupport.latency import LatencyProxy

N_OBJECTS = 30


def _put(root: str, files: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: fs.atomic_write(fs.join(root, item[0]), item[1]), files.items()))


def _corpus(root: str) -> None:
    _put(root, {"d/d1.jsonl": b"one\n", "d/d2.jsonl": b"two\n", "d/more/d3.jsonl": b"three\n",
                "d/.hidden/x.jsonl": b"no\n", "d/notes.txt": b"t\n", "d.bak": b"not below d\n"})


@pytest.mark.parametrize("emulator", ["gcp-storage-emulator", "fake-gcs-server"])
def test_an_object_is_its_content_not_its_generation(emulator: str, request: pytest.FixtureRequest) -> None:
    bucket = request.getfixturevalue({"gcp-storage-emulator": "gcs_bucket", "fake-gcs-server": "strict_gcs_bucket"}[emulator])
    _corpus(bucket)
    folder = fingerprint_source(f"{bucket}/d")
    assert folder.kind == "object"
    assert [name for name, _ in folder.files] == ["d1.jsonl", "d2.jsonl", "more/d3.jsonl", "notes.txt"]
    # crc32c and MD5 as the listing gives them, no generation.
    assert all(value.startswith("crc32c:") and ",md5:" in value and "gen" not in value for _, value in folder.files)
    assert [name for name, _ in folder.generations] == [name for name, _ in folder.files]
    fs.atomic_write(f"{bucket}/d/d1.jsonl", b"one\n")  # the same bytes again: a new generation
    again = fingerprint_source(f"{bucket}/d")
    assert again.digest == folder.digest and again.files == folder.files
    assert again.generations != folder.generations  # which write was read is kept, beside the digest
    assert [n for n, g in again.generations if folder.generations[[m for m, _ in folder.generations].index(n)][1] != g] \
        == ["d1.jsonl"]
    assert SourceFingerprint.from_json(again.to_json()) == again
    fs.atomic_write(f"{bucket}/d/d1.jsonl", b"ONE\n")  # other bytes: another fingerprint
    changed = fingerprint_source(f"{bucket}/d")
    assert changed.digest != folder.digest
    assert [n for n, v in changed.files if folder.file_map()[n] != v] == ["d1.jsonl"]


def test_globs_files_and_folders_pick_their_objects(gcs_bucket: str) -> None:
    _corpus(gcs_bucket)
    picked = fingerprint_sources([(f"{gcs_bucket}/d/*.jsonl", None), (f"{gcs_bucket}/d/**/*.jsonl", None),
                                  (f"{gcs_bucket}/d/d1.jsonl", None), (f"{gcs_bucket}/d/m*", None)])
    names = {spec: [name for name, _ in found.files] for (spec, _r), found in picked.items()}
    assert names == {f"{gcs_bucket}/d/*.jsonl": ["d1.jsonl", "d2.jsonl"],
                     f"{gcs_bucket}/d/**/*.jsonl": ["d1.jsonl", "d2.jsonl", "more/d3.jsonl"],
                     f"{gcs_bucket}/d/d1.jsonl": ["d1.jsonl"],
                     f"{gcs_bucket}/d/m*": ["more/d3.jsonl"]}
    assert [name for name, _ in fingerprint_source(gcs_bucket).files] == [
        "d.bak", "d/d1.jsonl", "d/d2.jsonl", "d/more/d3.jsonl", "d/notes.txt"]
    assert [name for name, _ in fingerprint_source(f"{gcs_bucket}/*.bak").files] == ["d.bak"]
    with pytest.raises(SourceUnavailable, match=r"^source 'gs://.*/d/\*\.parquet' matches no file$"):
        fingerprint_source(f"{gcs_bucket}/d/*.parquet")
    with pytest.raises(SourceUnavailable, match=r"^source 'gs://.*/nothing' matches no file$"):
        fingerprint_source(f"{gcs_bucket}/nothing")


def test_a_store_without_checksums_is_fingerprinted_by_size_and_time(memory_prefix: str) -> None:
    _corpus(memory_prefix)
    found = fingerprint_source(f"{memory_prefix}/d/*.jsonl")
    assert [name for name, _ in found.files] == ["d1.jsonl", "d2.jsonl"]
    assert all(value.startswith("size:4:mtime:") for _, value in found.files)
    fs.atomic_write(f"{memory_prefix}/d/d2.jsonl", b"TWO!\n")
    assert fingerprint_source(f"{memory_prefix}/d/*.jsonl").file_map()["d2.jsonl"].startswith("size:5:")
    assert object_fingerprint({"size": 3, "crc32c": "AAAAAA==", "generation": "7"}) == "crc32c:AAAAAA=="
    assert object_fingerprint({"crc32c": "AAAAAA==", "md5Hash": "1B2M2Y8AsgTpgAmY7PhCfg==", "generation": "8"}) \
        == "crc32c:AAAAAA==,md5:1B2M2Y8AsgTpgAmY7PhCfg=="
    assert object_fingerprint({"ETag": '"9a0364b9"', "VersionId": "v1"}) == 'etag:"9a0364b9"'


@pytest.fixture
def counted(strict_gcs_emulator: GcsEmulator) -> Iterator[tuple[str, LatencyProxy]]:
    """A fresh bucket on fake-gcs-server, reached through a request-counting proxy."""
    with LatencyProxy(strict_gcs_emulator.url) as proxy, use_gcs_emulator(proxy.url):
        yield strict_gcs_emulator.create_bucket(), proxy


def test_fingerprinting_costs_one_listing_per_prefix_however_many_sources_share_it(counted) -> None:
    bucket, proxy = counted
    _put(bucket, {f"data/part-{i:03d}.jsonl": b"%d\n" % i for i in range(N_OBJECTS)} | {"other/x.jsonl": b"x\n"})
    proxy.reset()
    whole = fingerprint_source(f"{bucket}/data")
    assert len(whole.files) == N_OBJECTS
    assert len(proxy.reset()) == 1  # one page of listing: gcsfs asks for 1,000 objects a page
    specs = [f"{bucket}/data", f"{bucket}/data/*.jsonl", f"{bucket}/data/part-00*", f"{bucket}/data/part-007.jsonl"]
    found = fingerprint_sources([(spec, None) for spec in specs])
    assert [r.split("?")[0] for r in proxy.reset()] == [f"GET /storage/v1/b/{bucket[5:]}/o"]
    assert found[(specs[0], None)] == whole and len(found[(specs[2], None)].files) == 10
    fingerprint_sources([(spec, None) for spec in [*specs, f"{bucket}/other/*.jsonl"]])
    assert len(proxy.reset()) == 2  # a second prefix, a second listing
