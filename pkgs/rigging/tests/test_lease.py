"""Leases: acquire, contend, renew, expire, take over, release, fencing, dead holders."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost, clear_leases, current_lease, holder_is_dead


@pytest.fixture(params=["local", "memory"])
def folder(request, tmp_path) -> str:
    """Fencing relies on create-if-absent, which the GCS emulator does not enforce."""
    if request.param == "local":
        return str(tmp_path / "step" / ".marin")
    return request.getfixturevalue("memory_prefix") + "/step/.marin"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_acquire_and_contend(folder):
    first = Lease.acquire(folder, ttl=30, holder="host:1:a")
    assert first is not None and first.token == 1
    assert Lease.acquire(folder, ttl=30, holder="host:2:b") is None
    info = current_lease(folder)
    assert info.token == 1 and info.holder == "host:1:a" and info.live()
    first.check()


def test_only_one_of_many_concurrent_contenders_wins(folder):
    winners: list[Lease] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        lease = Lease.acquire(folder, ttl=30, holder=f"elsewhere:{i}:x")
        if lease is not None:
            winners.append(lease)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1


def test_renew_pushes_the_expiry(folder):
    lease = Lease.acquire(folder, ttl=0.5, holder="host:1:a")
    before = current_lease(folder).expires_at
    time.sleep(0.1)
    lease.renew()
    assert current_lease(folder).expires_at > before
    assert lease.expires_at == current_lease(folder).expires_at


def test_heartbeat_keeps_a_short_lease_alive(folder):
    lease = Lease.acquire(folder, ttl=0.4, holder="otherhost:1:a")
    lease.start_heartbeat(interval=0.05)
    try:
        time.sleep(1.0)
        assert Lease.acquire(folder, ttl=1, holder="otherhost:2:b") is None
        lease.check()
    finally:
        lease.stop_heartbeat()


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced(folder):
    old = Lease.acquire(folder, ttl=0.2, holder="otherhost:1:old")
    time.sleep(0.3)
    assert not current_lease(folder).live()
    with pytest.raises(LeaseLost, match="expired"):
        old.check()
    new = Lease.acquire(folder, ttl=30, holder="otherhost:2:new")
    assert new is not None and new.token == old.token + 1
    new.check()
    # Even a renewal racing the takeover cannot bring the old holder back.
    old.expires_at = time.time() + 30
    with pytest.raises(LeaseLost, match="taken over"):
        old.check()
    with pytest.raises(LeaseLost):
        old.renew()
    assert current_lease(folder).holder == "otherhost:2:new"


def test_a_heartbeat_notices_the_takeover(folder):
    lease = Lease.acquire(folder, ttl=5, holder="otherhost:1:a")
    lease.start_heartbeat(interval=0.05)
    try:
        body = json.dumps({"holder": "thief:1:b", "expires_at": time.time() + 30, "token": lease.token + 1})
        assert fs.create_if_absent(fs.join(folder, f"lease-{lease.token + 1:08d}.json"), body)
        deadline = time.monotonic() + 5
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.lost is not None and "taken over" in lease.lost
        with pytest.raises(LeaseLost):
            lease.check()
    finally:
        lease.stop_heartbeat()


def test_release_lets_the_next_contender_in_at_once(folder):
    first = Lease.acquire(folder, ttl=300, holder="otherhost:1:a")
    first.release()
    assert current_lease(folder).released and not current_lease(folder).live()
    second = Lease.acquire(folder, ttl=300, holder="otherhost:2:b")
    assert second is not None and second.token == 2
    # Releasing a lease that was already taken over leaves the new holder's file alone.
    first.release()
    assert current_lease(folder).holder == "otherhost:2:b" and current_lease(folder).live()


def test_a_dead_holder_on_this_host_is_taken_over_before_expiry(folder):
    dead = f"{socket.gethostname()}:{_dead_pid()}:gone"
    assert holder_is_dead(dead)
    assert Lease.acquire(folder, ttl=300, holder=dead) is not None
    taker = Lease.acquire(folder, ttl=300, holder="otherhost:1:a")
    assert taker is not None and taker.token == 2


def test_holder_is_dead():
    host = socket.gethostname()
    assert holder_is_dead(f"{host}:{_dead_pid()}:x")
    assert not holder_is_dead(f"{host}:{os.getpid()}:x")  # this process
    assert not holder_is_dead(f"{host}:1:x")  # init: alive (or not ours to judge)
    assert not holder_is_dead(f"another-{host}:{_dead_pid()}:x")  # other hosts: judged by expiry
    assert not holder_is_dead("garbage")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not holder_is_dead(f"{host}:{sleeper.pid}:x")
        sleeper.kill()
        time.sleep(0.2)
        # Killed but not yet reaped (a zombie) counts as dead.
        assert holder_is_dead(f"{host}:{sleeper.pid}:x")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_unreadable_lease_file_never_wedges_the_folder(folder):
    fs.atomic_write(fs.join(folder, "lease-00000001.json"), "{not json")
    lease = Lease.acquire(folder, ttl=30, holder="otherhost:1:a")
    assert lease is not None and lease.token == 2


def test_clear_leases_removes_every_lease_file(folder):
    Lease.acquire(folder, ttl=0.01, holder="otherhost:1:a")
    time.sleep(0.02)
    Lease.acquire(folder, ttl=30, holder="otherhost:2:b")
    fs.atomic_write(fs.join(folder, "status.json"), "{}")
    clear_leases(folder)
    assert current_lease(folder) is None
    assert fs.listdir(folder) == ["status.json"]


def test_ttl_must_be_positive(folder):
    with pytest.raises(ValueError, match="ttl"):
        Lease.acquire(folder, ttl=0)
