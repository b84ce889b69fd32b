"""A process is known gone only where its pid can be checked: same boot, same PID namespace, and it
is gone, a zombie or its pid now names a process that started at another time. Never from a failed
signal: a container sharing this host's name cannot see our processes, nor we its."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

from rigging.pids import ProcessPlace
from testsupport.namespaces import (
    gone_place,
    of_another_boot,
    of_another_namespace,
    python_in_another_pid_namespace,
)


def test_this_process_is_named_where_its_pid_means_something():
    me = ProcessPlace.here()
    assert me is not None and me.pid == os.getpid() and me.pid_namespace == os.stat("/proc/self/ns/pid").st_ino
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert me.boot_id == f.read().strip()
    assert me.checkable_here() and not me.gone()
    assert ProcessPlace.here(os.getpid()) == me
    assert ProcessPlace.from_json(me.to_json()) == me and ProcessPlace.from_text(me.to_text()) == me


def test_a_gone_process_a_zombie_and_a_reused_pid_are_known_gone():
    assert gone_place().gone()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        place = ProcessPlace.here(sleeper.pid)
        assert place is not None and not place.gone()
        # Its pid, but a process that started at another time: not the holder.
        assert dataclasses.replace(place, started=place.started + 1).gone()
        sleeper.kill()
        deadline = time.monotonic() + 10
        while not place.gone() and time.monotonic() < deadline:  # killed, not yet reaped: a zombie
            time.sleep(0.02)
        assert place.gone() and sleeper.poll() is not None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_of_another_namespace_or_boot_is_never_known_gone():
    gone = gone_place()
    assert not of_another_namespace(gone).checkable_here() and not of_another_namespace(gone).gone()
    assert not of_another_boot(gone).checkable_here() and not of_another_boot(gone).gone()


def test_a_record_without_a_place_or_with_a_damaged_one_names_none():
    me = ProcessPlace.here()
    assert me is not None
    for damaged in (None, "x", {}, {**me.to_json(), "pid": "1"}, {**me.to_json(), "boot_id": ""},
                    {**me.to_json(), "pid": 0}, {**me.to_json(), "started": True}):
        assert ProcessPlace.from_json(damaged) is None, damaged
    for text in ("", "12", "12@b/1", "x@b/1/2", "0@b/1/2", "12@/1/2"):
        assert ProcessPlace.from_text(text) is None, text


CHECK_FROM_THERE = """
import json, sys
from rigging.pids import ProcessPlace
outside = ProcessPlace.from_text(sys.argv[1])
me = ProcessPlace.here()
print(json.dumps({"pid": me.pid, "checkable": outside.checkable_here(), "gone": outside.gone(),
                  "same_boot": me.boot_id == outside.boot_id}))
"""


def test_from_another_pid_namespace_a_live_process_here_is_not_known_gone():
    import json

    me = ProcessPlace.here()
    assert me is not None
    there = python_in_another_pid_namespace(CHECK_FROM_THERE, me.to_text())
    assert there.returncode == 0, there.stderr
    seen = json.loads(there.stdout)
    # Its pid here means another process (or none) there: a signal from there would fail.
    assert seen == {"pid": 1, "checkable": False, "gone": False, "same_boot": True}
