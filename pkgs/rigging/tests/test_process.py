"""Ending a process left behind by a dead parent, and never a stranger that reuses its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rigging.process import end_orphaned_process, process_identity


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


@pytest.mark.parametrize("forge", [lambda i: i.rsplit(":", 1)[0] + ":12.5", lambda i: "elsewhere:" + i.split(":", 1)[1]])
def test_a_reused_pid_or_another_hosts_process_is_left_alone(sleeper, forge):
    ended = end_orphaned_process(forge(process_identity(sleeper.pid)), wait_s=0.3)
    assert sleeper.poll() is None
    # A reused pid means the process named is gone; another host's process nobody here can judge.
    assert ended is forge(process_identity(sleeper.pid)).startswith(process_identity(sleeper.pid).split(":")[0] + ":")


@pytest.mark.parametrize("identity", ["", "not an identity", "host-only"])
def test_an_identity_that_names_no_process_here_cannot_be_said_to_have_ended(identity):
    assert end_orphaned_process(identity, wait_s=0.1) is False


def test_the_identity_names_host_pid_and_start_time(sleeper):
    host, pid, started = process_identity(sleeper.pid).split(":")
    assert int(pid) == sleeper.pid and float(started) > 0 and host
    assert process_identity(sleeper.pid) == process_identity(sleeper.pid)


def test_a_stopped_process_is_killed_without_waiting_for_it(sleeper):
    # A frozen process (SIGSTOP, as a preempted machine's) can never end on its own: waiting out
    # wait_s for it only delays the runner that takes its step over.
    os.kill(sleeper.pid, signal.SIGSTOP)
    started = time.monotonic()
    assert end_orphaned_process(process_identity(sleeper.pid), wait_s=120) is True
    assert sleeper.wait(timeout=10) == -9
    assert time.monotonic() - started < 60
