"""Processes that another PID namespace or boot holds, as a container sharing this host's name sees
them (``docker run --net=host``, ``hostNetwork`` pods): a real one made with ``unshare``, and
records naming processes whose pid means nothing here."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence

import pytest

from rigging import filesystem as fs
from rigging.pids import ProcessPlace

__all__ = ["UNSHARE", "gone_place", "held_at", "in_another_pid_namespace", "of_another_boot", "of_another_namespace",
           "python_in_another_pid_namespace"]

UNSHARE = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc")
"""A new user and PID namespace with its own ``/proc``, same host name, same files."""


@functools.cache
def _refused() -> str | None:
    """Why ``unshare`` cannot make a PID namespace here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command on this machine"
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare refused a new PID namespace here: {probe.stderr.strip() or probe.returncode}"
    return None


def in_another_pid_namespace(argv: Sequence[str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a new PID namespace of this machine (same host name, same files), skipping the
    test with the reason where the machine refuses one."""
    refused = _refused()
    if refused is not None:
        pytest.skip(refused)
    return subprocess.run([*UNSHARE, *argv], capture_output=True, text=True, timeout=timeout)


def python_in_another_pid_namespace(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`in_another_pid_namespace` of this interpreter running ``code``."""
    return in_another_pid_namespace([sys.executable, "-c", code, *args])


def gone_place() -> ProcessPlace:
    """The place of a process of this namespace that has ended (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "from rigging.pids import ProcessPlace; "
                            "print(ProcessPlace.here().to_text())"], capture_output=True, text=True, check=True)
    place = ProcessPlace.from_text(child.stdout.strip())
    assert place is not None, child.stdout
    return place


def of_another_namespace(place: ProcessPlace) -> ProcessPlace:
    """``place`` as if in a PID namespace that is not this process's."""
    return dataclasses.replace(place, pid_namespace=place.pid_namespace + 1)


def of_another_boot(place: ProcessPlace) -> ProcessPlace:
    """``place`` as if of another boot (another machine, or this one before it restarted)."""
    return dataclasses.replace(place, boot_id="00000000-0000-0000-0000-000000000000")


def held_at(record: str, place: ProcessPlace | None) -> None:
    """Rewrite the lease file or temporary root ``record`` as if its holder's process were at
    ``place`` (None: a record written before records named it)."""
    body = json.loads(fs.read_bytes(record))
    body.pop("process", None)
    if place is not None:
        body["process"] = place.to_json()
    fs.atomic_write(record, json.dumps(body))
