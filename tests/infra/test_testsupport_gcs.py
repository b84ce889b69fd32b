"""The shared fixtures themselves: the GCS emulators, fresh buckets and memory roots."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import fsspec
import pytest
from gcsfs.core import GCSFileSystem

from rigging import filesystem as rfs
from rigging.gcs import use_in_fsspec
from rigging.gcs_client import RetryingGCSFileSystem
from testsupport import gcs as testing


def test_emulator_environment_is_set(gcs_emulator):
    for key, value in testing.emulator_env(gcs_emulator.url).items():
        assert os.environ[key] == value
    assert gcs_emulator.url.startswith("http://127.0.0.1:")
    # Plain fsspec users get gcsfs pointed at the emulator too: gcsfs's own class until a process
    # uses the store on gs:// (earlier tests of this worker may have), then the store's.
    fs = fsspec.filesystem("gs")
    assert isinstance(fs, GCSFileSystem) and fs._location == gcs_emulator.url
    use_in_fsspec()  # what a step on a gs:// prefix does as it starts (Orbax opens gs:// through fsspec)
    fs = fsspec.filesystem("gs")
    assert isinstance(fs, RetryingGCSFileSystem) and fs._location == gcs_emulator.url


def test_buckets_are_fresh_and_empty(gcs_bucket, gcs_emulator):
    other = gcs_emulator.create_bucket()
    assert gcs_bucket.startswith("gs://") and other != gcs_bucket
    assert rfs.listdir(gcs_bucket) == []
    rfs.atomic_write(rfs.join(gcs_bucket, "x"), b"1")
    assert rfs.listdir(gcs_bucket) == ["x"]
    assert rfs.listdir(other) == []


def test_memory_prefixes_are_fresh(memory_prefix):
    assert memory_prefix.startswith("memory://")
    assert rfs.listdir(memory_prefix) == []
    rfs.atomic_write(rfs.join(memory_prefix, "x"), b"1")
    assert testing.new_memory_prefix() != memory_prefix


def test_child_processes_reach_the_emulator(gcs_bucket):
    """Runners and workers are separate processes: they inherit the emulator through the env."""
    rfs.atomic_write(rfs.join(gcs_bucket, "from-parent"), b"parent")
    code = (
        "import sys; from rigging import filesystem as f; b = sys.argv[1];"
        "print(f.read_text(f.join(b, 'from-parent')));"
        "f.atomic_write(f.join(b, 'from-child'), 'child')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, gcs_bucket], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "parent"
    assert rfs.read_text(rfs.join(gcs_bucket, "from-child")) == "child"
    # Anonymous from the start: no failed probe for Google credentials on the way.
    assert "Authentication failed" not in out.stderr


def test_use_gcs_emulator_restores_what_it_changed(gcs_emulator):
    before = {k: os.environ.get(k) for k in testing.emulator_env("x")}
    with testing.use_gcs_emulator("http://127.0.0.1:9"):
        assert os.environ["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:9"
        assert fsspec.filesystem("gs")._location == "http://127.0.0.1:9"
    assert {k: os.environ.get(k) for k in before} == before
    assert fsspec.filesystem("gs")._location == gcs_emulator.url


def test_a_stopped_emulator_no_longer_answers():
    emulator = testing.start_gcs_emulator()
    try:
        with urllib.request.urlopen(emulator.url + "/", timeout=5) as response:
            assert response.status == 200
        emulator.create_bucket("named-bucket")
    finally:
        emulator.stop()
    assert not emulator.alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(emulator.url + "/", timeout=2)


def test_the_emulator_survives_clients_dropping_mid_request():
    # A writer killed mid-upload leaves the emulator a cut request, for which it prints a
    # traceback (about 2.7 KB). Far more of those than a pipe holds (64 KB) must not stop it.
    emulator = testing.start_gcs_emulator()
    try:
        for _ in range(60):
            with socket.create_connection((emulator.host, emulator.port), timeout=5) as s:
                s.sendall(b"POST /storage/v1/b?project=test HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"na")
            assert emulator.create_bucket().startswith("gs://")  # one at a time: it is single-threaded
        assert emulator.stderr().count("Traceback") == 60  # the errors were printed, and kept
    finally:
        emulator.stop()
    assert not emulator.alive()


def test_strict_bucket_points_gs_at_fake_gcs_server(strict_gcs_bucket, strict_gcs_emulator):
    assert strict_gcs_emulator.kind is testing.EmulatorKind.FAKE_GCS_SERVER
    assert os.environ["STORAGE_EMULATOR_HOST"] == strict_gcs_emulator.url
    assert os.environ["TENSORSTORE_GCS_HTTP_URL"] == strict_gcs_emulator.url
    assert fsspec.filesystem("gs")._location == strict_gcs_emulator.url
    rfs.atomic_write(rfs.join(strict_gcs_bucket, "a/b.txt"), b"strict")
    assert rfs.listdir(strict_gcs_bucket) == ["a"]
    assert rfs.read_bytes(rfs.join(strict_gcs_bucket, "a/b.txt")) == b"strict"


def test_fake_gcs_server_enforces_the_precondition_on_multipart_uploads_only(strict_gcs_emulator):
    """What makes it the strict emulator, measured on its wire protocol: a second multipart upload
    with ``ifGenerationMatch=0`` gets 412; a second media upload with the same precondition goes
    through (real GCS refuses both with 412: the store sends only multipart ones)."""
    bucket = strict_gcs_emulator.create_bucket().removeprefix("gs://")
    base = f"{strict_gcs_emulator.url}/upload/storage/v1/b/{bucket}/o?ifGenerationMatch=0"

    def media(body: bytes) -> int:
        return _status(urllib.request.Request(f"{base}&uploadType=media&name=m", data=body, method="POST"))

    def multipart(body: bytes) -> int:
        data = (b'--b\r\nContent-Type: application/json\r\n\r\n{"name": "p"}\r\n--b\r\n'
                b"Content-Type: application/octet-stream\r\n\r\n" + body + b"\r\n--b--")
        return _status(urllib.request.Request(f"{base}&uploadType=multipart", data=data, method="POST",
                                              headers={"Content-Type": 'multipart/related; boundary="b"'}))

    assert [multipart(b"1"), multipart(b"2")] == [200, 412]
    assert [media(b"1"), media(b"2")] == [200, 200]


def _status(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_stopped_fake_gcs_server_no_longer_answers():
    emulator = testing.start_fake_gcs_server()
    try:
        assert emulator.create_bucket("named-bucket") == "gs://named-bucket"
    finally:
        emulator.stop()
    assert not emulator.alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(emulator.url + "/storage/v1/b", timeout=2)
