"""Ending a process left behind by a dead parent, and never a stranger that reuses its pid."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rigging.pids import ProcessPlace
from rigging.process import end_orphaned_process, process_identity
from testsupport.namespaces import gone_place, of_another_boot, of_another_namespace


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_process_left_behind_is_ended_with_its_group(sleeper):
    assert end_orphaned_process(process_identity(sleeper.pid), wait_s=0.3) is True
    assert sleeper.wait(timeout=10) == -9


def test_a_process_that_ends_on_its_own_is_not_killed():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"], start_new_session=True)
    assert end_orphaned_process(process_identity(proc.pid), wait_s=10) is True
    assert proc.wait(timeout=10) == 0


def _forged(identity: str, change: str) -> str:
    host, _, text = identity.partition(":")
    place = ProcessPlace.from_text(text)
    assert place is not None, identity
    forged = {"a reused pid": dataclasses.replace(place, started=place.started + 1),
              "another PID namespace": of_another_namespace(place), "another boot": of_another_boot(place)}[change]
    return f"{host}:{forged.to_text()}"


@pytest.mark.parametrize("change", ["a reused pid", "another PID namespace", "another boot"])
def test_a_reused_pid_or_a_process_of_another_namespace_or_boot_is_left_alone(sleeper, change):
    ended = end_orphaned_process(_forged(process_identity(sleeper.pid), change), wait_s=0.3)
    assert sleeper.poll() is None
    # A reused pid means the process named is gone; one of another namespace or boot (a container
    # sharing this host's name, another machine) nobody here can judge.
    assert ended is (change == "a reused pid")


@pytest.mark.parametrize("identity", ["", "not an identity", "host-only", "host:12:", "host:12:1.5"])
def test_an_identity_that_names_no_process_here_cannot_be_said_to_have_ended(identity):
    assert end_orphaned_process(identity, wait_s=0.1) is False


def test_the_identity_names_host_and_the_place_of_the_process(sleeper):
    host, _, text = process_identity(sleeper.pid).partition(":")
    assert host == socket.gethostname() and ProcessPlace.from_text(text) == ProcessPlace.here(sleeper.pid)
    assert process_identity(sleeper.pid) == process_identity(sleeper.pid)


def test_an_identity_of_an_older_form_is_never_taken_for_an_ended_process(sleeper):
    # host:pid:start time, without the boot and namespace: it may be a container's, so it is left alone.
    gone = gone_place()
    assert end_orphaned_process(f"{socket.gethostname()}:{gone.pid}:1.5", wait_s=0.1) is False
    assert end_orphaned_process(f"{socket.gethostname()}:{gone.to_text()}", wait_s=0.1) is True


def test_a_stopped_process_is_killed_without_waiting_for_it(sleeper):
    # A frozen process (SIGSTOP, as a preempted machine's) can never end on its own: waiting out
    # wait_s for it only delays the runner that takes its step over.
    os.kill(sleeper.pid, signal.SIGSTOP)
    started = time.monotonic()
    assert end_orphaned_process(process_identity(sleeper.pid), wait_s=120) is True
    assert sleeper.wait(timeout=10) == -9
    assert time.monotonic() - started < 60
