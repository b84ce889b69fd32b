"""The shared fixtures themselves: the GCS emulator, fresh buckets and memory roots."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import fsspec
import pytest

from rigging import filesystem as rfs
from rigging import testing


def test_emulator_environment_is_set(gcs_emulator):
    for key, value in testing.emulator_env(gcs_emulator.url).items():
        assert os.environ[key] == value
    assert gcs_emulator.url.startswith("http://127.0.0.1:")
    # Plain fsspec users get the core gcsfs class pointed at the emulator too.
    fs = fsspec.filesystem("gs")
    assert type(fs).__module__ == "gcsfs.core"
    assert fs._location == gcs_emulator.url


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
