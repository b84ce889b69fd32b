"""An attempt's log: pulled from a worker elsewhere without repeats, masked, uploaded beside a remote output."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import fsspec

from marin.execution.run import attempt_log
from marin.execution.run.attempt_log import AttemptLog
from marin.execution.run.secrets import SecretMask
from marin.execution.store.leftovers import temp_leftovers
from rigging.tempdirs import MARIN_STEP_LOG


class _Handle:
    def __init__(self) -> None:
        self.text = ""

    def logs(self) -> str:
        return self.text


def test_a_pulled_log_takes_each_line_once_and_starts_again_with_a_retry(tmp_path):
    log = AttemptLog(str(tmp_path / "out"), SecretMask(("hunter2",)), pulled=True)
    handle = _Handle()
    handle.text = "one hunter2\n"
    log.pull(handle, final=True)
    handle.text += "two\n"
    log.poll(handle)  # within a second of the last pull: nothing yet
    log.pull(handle, final=True)
    log.next_attempt(handle, "[marin] again\n")
    retried = _Handle()
    retried.text = "three\n"
    log.close(retried)
    assert log.path == log.local
    assert open(log.path).read() == "one ***\ntwo\n[marin] again\nthree\n"


def test_a_remote_outputs_log_is_uploaded_beside_it_when_closed():
    log = AttemptLog("memory://logs/out", SecretMask(), pulled=True)
    assert log.remote is not None and log.local != log.remote
    handle = _Handle()
    handle.text = "hello\n"
    log.close(handle)
    assert log.path == log.remote == log.local

    with fsspec.open(log.remote, "r") as f:
        assert f.read() == "hello\n"  # type: ignore[union-attr]


def _scratch_folders(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(MARIN_STEP_LOG))


def test_a_remote_outputs_log_leaves_no_temporary_folder_however_the_attempt_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    quiet = AttemptLog("memory://logs/quiet", SecretMask(), pulled=True)
    assert _scratch_folders(tmp_path)  # the local copy's folder, while the attempt runs
    quiet.close(_Handle())  # the worker printed nothing: nothing to upload, and the folder goes
    assert _scratch_folders(tmp_path) == []
    assert not fsspec.filesystem("memory").exists("/logs/quiet/.marin/log.txt")

    lost = AttemptLog("memory://logs/lost", SecretMask(), pulled=True)
    lost.append("mine\n")
    lost.discard()  # its lease was lost: the log is the new holder's to write, not uploaded
    lost.discard()
    assert _scratch_folders(tmp_path) == []
    assert not fsspec.filesystem("memory").exists("/logs/lost/.marin/log.txt")

    local = AttemptLog(str(tmp_path / "out"), SecretMask(), pulled=False)
    local.append("kept\n")
    local.discard()  # a local output's log is beside it, never a temporary copy: discard keeps it
    assert open(local.path).read() == "kept\n"


def test_a_log_that_cannot_be_uploaded_is_dropped_with_a_warning_when_the_attempt_is_set_aside(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    log = AttemptLog("memory://logs/unreachable", SecretMask(), pulled=True)
    handle = _Handle()
    handle.text = "printed before the interrupt\n"

    def unreachable(path, data):
        raise OSError(f"{path}: the store is unreachable")

    monkeypatch.setattr(attempt_log.fs, "atomic_write", unreachable)
    log.end(handle)  # an interrupted runner still records the step and gives its lease back
    assert _scratch_folders(tmp_path) == []
    assert "could not be kept" in caplog.text and "memory://logs/unreachable" in caplog.text


def test_the_log_folder_of_a_killed_runner_is_a_leftover_gc_finds(tmp_path):
    # A runner killed with its attempt running (os._exit: no cleanup of any kind) leaves its folder.
    code = ("import os, sys, tempfile; tempfile.tempdir = sys.argv[1]; "
            "from marin.execution.run.attempt_log import AttemptLog; from marin.execution.run.secrets import SecretMask; "
            "AttemptLog('memory://logs/killed', SecretMask(), pulled=True).append('half a log'); os._exit(9)")
    assert subprocess.run([sys.executable, "-c", code, str(tmp_path)]).returncode == 9
    (left,) = _scratch_folders(tmp_path)
    assert [(f.path, f.kind, f.bytes) for f in temp_leftovers(str(tmp_path))] == \
        [(str(tmp_path / left), "step logs for a remote store", len("half a log"))]
