"""Leases: acquire, contend, renew, expire, take over, release, fencing, dead holders.

Every test runs on the stores whose create-if-absent is atomic against concurrent creators: local
(hard links), memory:// (one lock of this process) and gs:// on fake-gcs-server, which enforces
``ifGenerationMatch=0`` on the multipart uploads the lease's create-if-absent sends, as real GCS
does on every object insert (412 when a live generation exists). ``gcp-storage-emulator`` ignores
preconditions, so races are never judged on it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost, clear_leases, current_lease, held, watch_lease
from rigging.pids import ProcessPlace
from testsupport.namespaces import (
    gone_place,
    held_at,
    of_another_boot,
    of_another_namespace,
    python_in_another_pid_namespace,
)


@pytest.fixture(params=["local", "memory", "gs-fake-gcs"])
def folder(request, tmp_path) -> str:
    """A step's ``.marin/`` folder on each store that enforces create-if-absent."""
    if request.param == "local":
        return str(tmp_path / "step" / ".marin")
    if request.param == "memory":
        return request.getfixturevalue("memory_prefix") + "/step/.marin"
    return request.getfixturevalue("strict_gcs_bucket") + "/step/.marin"


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


def test_a_holder_whose_process_is_gone_is_taken_over_before_expiry(folder):
    first = Lease.acquire(folder, ttl=300, holder=f"{socket.gethostname()}:1:gone")
    assert first is not None and first.process == ProcessPlace.here()
    assert current_lease(folder).process == ProcessPlace.here() and held(folder) is not None
    held_at(first.path, gone_place())
    assert held(folder) is None
    taker = Lease.acquire(folder, ttl=300, holder="otherhost:1:a")
    assert taker is not None and taker.token == 2


@pytest.mark.parametrize("where", ["another PID namespace", "another boot", "not recorded"])
def test_a_holder_whose_pid_cannot_be_checked_here_holds_until_expiry(folder, where):
    # Its pid is of a process gone from this namespace, and its host name is this one's: a
    # container on this host (docker --net=host), or a file of an older version. Only expiry ends it.
    gone = gone_place()
    holder = f"{socket.gethostname()}:{gone.pid}:x"
    first = Lease.acquire(folder, ttl=0.5, holder=holder)
    assert first is not None
    place = {"another PID namespace": of_another_namespace(gone), "another boot": of_another_boot(gone),
             "not recorded": None}[where]
    held_at(first.path, place)
    info = held(folder)
    assert info is not None and info.holder == holder and info.process == place
    assert Lease.acquire(folder, ttl=300, holder="otherhost:1:a") is None
    time.sleep(0.6)
    assert held(folder) is None
    taker = Lease.acquire(folder, ttl=300, holder="otherhost:1:a")
    assert taker is not None and taker.token == 2


TAKE_FROM_THERE = """
import json, sys
from rigging.lease import Lease, held
folder = sys.argv[1]
seen = held(folder)
taken = Lease.acquire(folder, ttl=300)
print(json.dumps({"held": seen.token if seen else None, "taken": taken.token if taken else None}))
"""


def test_from_another_pid_namespace_a_live_lease_is_held_and_not_taken(tmp_path):
    # The reproduction: `unshare -Urpf --mount-proc` on the same host, a live holder here.
    folder = str(tmp_path / "step" / ".marin")
    lease = Lease.acquire(folder, ttl=300)
    assert lease is not None
    lease.start_heartbeat()
    try:
        there = python_in_another_pid_namespace(TAKE_FROM_THERE, folder)
        assert there.returncode == 0, there.stderr
        assert json.loads(there.stdout) == {"held": 1, "taken": None}
        lease.check()  # still the newest: nobody took it over
    finally:
        lease.release()


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


def test_clear_keeps_the_newest_number_released_so_numbers_never_repeat(folder):
    first = Lease.acquire(folder, ttl=30, holder="otherhost:1:a")
    first.release()
    second = Lease.acquire(folder, ttl=30, holder="otherhost:2:b")
    second.clear()  # published: older files go, the newest stays, released
    assert fs.listdir(folder) == ["lease-00000002.json"]
    info = current_lease(folder)
    assert info.token == 2 and info.released and not info.live()
    third = Lease.acquire(folder, ttl=30, holder="otherhost:3:c")
    assert third is not None and third.token == 3


def test_a_holder_whose_late_renewal_lands_after_the_next_holder_published_stays_fenced(folder):
    """The old holder's heartbeat checked its lease, then stalled before its write; meanwhile the
    lease expired, another holder took it over, built, published and cleared it. The stalled write
    then lands: it rewrites the old holder's file with a fresh expiry. The old holder must still find
    itself fenced (were the newest file deleted on clear, its own number would be the newest again)."""
    old = Lease.acquire(folder, ttl=0.2, holder="otherhost:1:old")
    time.sleep(0.3)
    new = Lease.acquire(folder, ttl=30, holder="otherhost:2:new")
    assert new is not None and new.token == old.token + 1
    new.clear()
    late = time.time() + 30  # what the stalled renewal computed, and now writes
    fs.atomic_write(old.path, json.dumps({"holder": old.holder, "expires_at": late, "token": old.token}))
    old.expires_at = late
    with pytest.raises(LeaseLost, match="taken over"):
        old.check()
    # And nobody else mistakes the rewritten old file for the current lease.
    assert current_lease(folder).token == new.token
    assert Lease.acquire(folder, ttl=30, holder="otherhost:3:next").token == new.token + 1


def test_ttl_must_be_positive(folder):
    with pytest.raises(ValueError, match="ttl"):
        Lease.acquire(folder, ttl=0)


def _expire(folder: str) -> None:
    """Make the newest lease look as a holder that stopped renewing leaves it: its expiry passed."""
    info = current_lease(folder)
    if info is not None:
        fs.atomic_write(fs.join(folder, f"lease-{info.token:08d}.json"),
                        json.dumps({"holder": info.holder, "expires_at": time.time() - 1, "token": info.token}))


def test_rounds_of_racing_takeovers_give_each_number_to_one_thread(folder):
    """Eight threads race to take over the expired lease, round after round: each round exactly one
    wins, with the next number, and the file of that number names it."""
    n_threads, rounds = 8, 12
    barrier = threading.Barrier(n_threads, action=lambda: _expire(folder))
    won: list[tuple[int, int, str]] = []
    errors: list[BaseException] = []

    def contend(k: int) -> None:
        try:
            for r in range(rounds):
                barrier.wait(timeout=60)
                lease = Lease.acquire(folder, ttl=60, holder=f"otherhost:{k}:r{r}")
                if lease is not None:
                    won.append((r, lease.token, lease.holder))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=contend, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    assert sorted((r, token) for r, token, _ in won) == [(r, r + 1) for r in range(rounds)]
    for _r, token, holder in won:
        assert json.loads(fs.read_bytes(fs.join(folder, f"lease-{token:08d}.json")))["holder"] == holder


# One process of a takeover race. Each round it meets the others, tries to take the lease over and
# meets them again (every contender has tried); then the round's winner lets its lease expire (it
# writes the expiry a holder that stopped renewing leaves), and whoever won the round before asks
# whether its lease is still its own. That lease has 60 s to go by its holder's clock (a renewal
# racing the takeover, or a clock behind the others' look the same): only the numbers on the
# folder can tell it that it lost.
_TAKER = r"""
import json, os, sys, time
from rigging import filesystem as fs
from rigging.lease import Lease, LeaseLost
folder, me, meet, rounds, n_procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def gather(name):
    here = os.path.join(meet, name)
    os.makedirs(here, exist_ok=True)
    open(os.path.join(here, me), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(here)) < n_procs:
        if time.monotonic() > deadline:
            raise SystemExit(f"{me}: the others never came to {name}")
        time.sleep(0.0005)

fs.listdir(folder)  # the store's client is ready before the first race
mine = None
for r in range(rounds):
    gather(f"{r}-try")
    lease = Lease.acquire(folder, ttl=60, holder=f"otherhost:{me}:r{r}")
    if lease is not None:
        print(json.dumps({"won": r, "token": lease.token}), flush=True)
    gather(f"{r}-tried")
    if mine is not None:
        try:
            mine.check()
            print(json.dumps({"kept": mine.token}), flush=True)
        except LeaseLost as e:
            print(json.dumps({"fenced": mine.token, "why": str(e)}), flush=True)
    mine = lease
    if lease is not None and r < rounds - 1:
        fs.atomic_write(lease.path, json.dumps({"holder": lease.holder, "expires_at": time.time() - 1,
                                                "token": lease.token}))
if mine is not None:
    mine.check()
    print(json.dumps({"holds": mine.token}), flush=True)
"""


@pytest.mark.parametrize("store", ["local", "gs-fake-gcs"])
def test_processes_racing_to_take_over_an_expired_lease_one_wins_each_number_and_losers_are_fenced(
        store, request, tmp_path):
    """Three processes (each its own store client) race to take over the expired lease, round after
    round: exactly one wins each number, in order; each round's winner, asked in the next round
    (its own clock still says its lease is live), finds by fencing (``Lease.check``) that it lost."""
    if store == "local":
        folder = str(tmp_path / "step" / ".marin")
    else:
        folder = request.getfixturevalue("strict_gcs_bucket") + "/step/.marin"
    n_procs, rounds = 3, 10
    procs = [subprocess.Popen([sys.executable, "-c", _TAKER, folder, f"p{k}", str(tmp_path / "meet"), str(rounds),
                               str(n_procs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(n_procs)]
    events: list[tuple[str, dict]] = []
    for k, proc in enumerate(procs):
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        events += [(f"p{k}", json.loads(line)) for line in out.splitlines()]
    wins = sorted((e["won"], e["token"], who) for who, e in events if "won" in e)
    assert [(r, token) for r, token, _ in wins] == [(r, r + 1) for r in range(rounds)]
    fenced = sorted((e["fenced"], who) for who, e in events if "fenced" in e)
    # Every winner but the last learns it lost its number to the next round's winner.
    assert fenced == [(token, who) for _r, token, who in wins[:-1]]
    assert all("taken over" in e["why"] for _who, e in events if "fenced" in e)
    assert not [e for _who, e in events if "kept" in e]
    assert [(who, e["holds"]) for who, e in events if "holds" in e] == [(wins[-1][2], rounds)]


def _watched(folder: str, lease: Lease) -> tuple[threading.Event, list[str]]:
    lost, why = threading.Event(), []

    def on_lost(message: str) -> None:
        why.append(message)
        why.append(repr(time.time()))  # when it was called
        lost.set()

    watch_lease(folder, lease.token, lease.ttl, on_lost)
    return lost, why


def test_a_watch_from_outside_the_holder_stays_quiet_while_the_holder_renews(folder):
    lease = Lease.acquire(folder, ttl=0.4, holder="a")
    assert lease is not None
    lease.start_heartbeat()
    try:
        lost, _ = _watched(folder, lease)
        assert not lost.wait(1.0)  # two and a half lifetimes of the lease (ten of the watch's looks), renewed all along
    finally:
        lease.release()


def test_a_watch_from_outside_the_holder_sees_a_takeover(folder):
    # Seen at the watch's next look (every ttl / 4), long before the unrenewed lease is given up.
    lease = Lease.acquire(folder, ttl=2.0, holder="a")
    assert lease is not None
    lost, why = _watched(folder, lease)
    assert fs.create_if_absent(fs.join(folder, "lease-00000002.json"),
                               json.dumps({"holder": "b", "token": 2, "expires_at": time.time() + 30}))
    assert lost.wait(0.5 + 1)
    assert "taken over (newest is 2)" in why[0]


def test_a_watch_from_outside_the_holder_sees_a_holder_that_stopped_renewing(folder):
    # The holder is frozen: its lease file keeps the expiry it last wrote.
    lease = Lease.acquire(folder, ttl=0.6, holder="a")
    assert lease is not None
    started = time.time()
    lost, why = _watched(folder, lease)
    assert lost.wait(10)
    assert "was not renewed: given up" in why[0]
    # At the moment its holder would have given it up: before its expiry, so before any other
    # holder may start (not at the expiry, as before the store's requests were bounded).
    at = float(why[1])
    assert lease.gives_up_at <= at < lease.expires_at and at - started < 5


def test_a_watch_from_outside_the_holder_sees_a_release(folder):
    lease = Lease.acquire(folder, ttl=2.0, holder="a")
    assert lease is not None
    lost, why = _watched(folder, lease)
    lease.release()
    assert lost.wait(0.5 + 1)
    assert "released" in why[0]
