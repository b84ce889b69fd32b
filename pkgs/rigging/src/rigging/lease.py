"""Per-folder leases with heartbeat, expiry and fencing, on any file system with create-if-absent.

A lease on ``folder`` is a series of numbered files ``lease-00000001.json``, ``lease-00000002.json``
… each created with :func:`rigging.filesystem.create_if_absent`, so exactly one contender wins
each number. The highest number is the current lease; its number is the fencing token. A holder
heartbeats by rewriting its own file with a later expiry. A contender takes over a lease whose
expiry has passed (holder dead or stuck) by creating the next number. A holder checks, before it
publishes, that its number is still the highest and its expiry has not passed: a holder that lost
its lease cannot publish.

A lease file names its holder's process where its pid means something (:class:`rigging.pids.ProcessPlace`):
a contender on the same machine, in the same PID namespace, takes over at once from a holder whose
process is known gone; any other holder (another host, container or boot, or a file written before
lease files named it) holds its lease until the lease expires. A failed signal never says a holder died.

A holder whose renewals keep failing gives the lease up a margin before its expiry
(:func:`give_up_margin`), so its work stops while the lease is still its own; a step watching its
own lease (:func:`watch_lease`) ends itself then too. Its requests under the lease are bounded by
that moment (:meth:`Lease.fenced`): a stalled renewal or publish cannot hold on past it.

Numbers never repeat on a folder: giving a lease up for good (:meth:`Lease.clear`) deletes the
older files but leaves the newest, marked released. Were it deleted, the next contender would take
number 1 again, and a holder of an old number that was stalled inside a renewal (its check passed,
its write had not landed) would, on waking, write its file back and then pass every check: the
highest number on the folder would be its own again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from rigging import filesystem as fs
from rigging.pids import ProcessPlace, holder_live
from rigging.store_requests import DeadlineReached, store_deadline

__all__ = ["Lease", "LeaseInfo", "LeaseLost", "clear_leases", "current_lease", "give_up_margin", "held",
           "watch_lease"]

logger = logging.getLogger(__name__)

_LEASE_RE = re.compile(r"^lease-(\d{8})\.json$")


class LeaseLost(RuntimeError):
    """This holder's lease was taken over or expired; it must not publish."""


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease file says.

    Attributes:
        token: the lease's number (fencing token).
        holder: who holds it (host, pid, runner id).
        expires_at: wall-clock time (seconds since the epoch) after which it may be taken over.
        released: the holder gave it up.
        process: where the holder's process runs (None: a file that does not say, judged by its
            expiry alone).
    """

    token: int
    holder: str
    expires_at: float
    released: bool = False
    process: ProcessPlace | None = None

    def live(self, now: float | None = None) -> bool:
        """True while the lease is held: not released, not expired, and its holder's process not
        known gone (:meth:`rigging.pids.ProcessPlace.gone`)."""
        return not self.released and holder_live(self.expires_at, self.process, now)


GIVE_UP_MARGIN_S = 5.0
"""The most a lease is given up before its expiry (:func:`give_up_margin`)."""


def give_up_margin(ttl: float) -> float:
    """How long before its expiry a lease of ``ttl`` seconds is given up if not renewed: a tenth of
    it, at most :data:`GIVE_UP_MARGIN_S`, time for the holder to stop its step (and for two hosts'
    clocks to disagree) before another may take the lease."""
    return min(ttl / 10, GIVE_UP_MARGIN_S)


def _lease_name(token: int) -> str:
    return f"lease-{token:08d}.json"


def _tokens_in(names: Iterable[str]) -> list[int]:
    """The lease numbers among the file names of a folder, ascending."""
    return sorted(int(m.group(1)) for m in map(_LEASE_RE.match, names) if m)


def _tokens(folder: str) -> list[int]:
    return _tokens_in(fs.listdir(folder))


def _read(folder: str, token: int) -> LeaseInfo | None:
    # A lease file is written whole (atomic write / create-if-absent); an unreadable one is
    # treated as expired so it can never wedge the step.
    unreadable = LeaseInfo(token=token, holder="<unreadable>", expires_at=0.0)
    try:
        data = json.loads(fs.read_bytes(fs.join(folder, _lease_name(token))))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return unreadable
    if not isinstance(data, dict):
        return unreadable
    expires_at = data.get("expires_at", 0.0)
    if type(expires_at) not in (int, float) or expires_at != expires_at:  # not a number, or NaN
        return unreadable
    return LeaseInfo(
        token=token,
        holder=str(data.get("holder", "?")),
        expires_at=float(expires_at),
        released=data.get("released", False) is True,
        process=ProcessPlace.from_json(data.get("process")),
    )


def current_lease(folder: str) -> LeaseInfo | None:
    """The newest lease on ``folder`` (live or not), or None if there never was one."""
    tokens = _tokens(folder)
    return _read(folder, tokens[-1]) if tokens else None


def held(folder: str) -> LeaseInfo | None:
    """The lease on ``folder`` if someone holds it now (:meth:`LeaseInfo.live`: not expired, not
    released, its holder's process not known gone)."""
    info = current_lease(folder)
    return info if info is not None and info.live() else None


def watch_lease(folder: str, token: int, ttl: float, on_lost: Callable[[str], None]) -> threading.Thread:
    """Watch lease ``token`` on ``folder`` from outside its holder (the process the holder runs the
    leased work in, perhaps on another host), in a daemon thread: ``on_lost(why)`` is called once
    the lease is taken over, released, or not renewed before its expiry.

    The holder's own heartbeat stops the work when it finds the lease lost, but a holder that is
    frozen (a stopped process, a suspended machine) cannot, while its work may still run; the work
    watching for itself stops by the moment its holder would give the lease up
    (:func:`give_up_margin` before the expiry), before another holder may start. The file is read
    every ``ttl / 4`` and again at that moment; a read that fails, or is not answered by then,
    keeps the last expiry seen.
    """
    interval = max(ttl / 4, 0.05)
    margin = give_up_margin(ttl)

    def watch() -> None:
        # The store's client is made first (a fresh step process imports it), so that its making
        # does not use up the time the first reads have.
        if not fs.is_local(folder):
            fs.filesystem(folder)
        expires_at = time.time() + ttl
        while True:
            try:
                with store_deadline(expires_at - margin):
                    info = current_lease(folder)
            except OSError:
                info = None  # the store cannot say: judge by the last expiry seen
            if info is not None and info.token != token:
                on_lost(f"lease {token} on {folder} was taken over (newest is {info.token})")
                return
            if info is not None and info.holder != "<unreadable>":
                if info.released:
                    on_lost(f"lease {token} on {folder} was released")
                    return
                expires_at = info.expires_at
            if time.time() >= expires_at - margin:
                on_lost(f"lease {token} on {folder} was not renewed: given up {margin:.1f}s before its expiry")
                return
            time.sleep(min(interval, max(expires_at - margin - time.time(), 0.0) + 0.01))

    thread = threading.Thread(target=watch, name=f"lease-{token}-watch", daemon=True)
    thread.start()
    return thread


def _body(holder: str, token: int, expires_at: float, process: ProcessPlace | None, *, released: bool = False) -> str:
    """What a lease file holds."""
    fields: dict[str, object] = {"holder": holder, "expires_at": expires_at, "token": token}
    if process is not None:
        fields["process"] = process.to_json()
    if released:
        fields["released"] = True
    return json.dumps(fields)


def default_holder() -> str:
    """A holder id naming this host and process, unique per call."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Lease:
    """A held lease. Build with :meth:`acquire`."""

    folder: str
    token: int
    holder: str
    ttl: float
    expires_at: float
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)
    _lost_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost: str | None = field(default=None, repr=False)
    on_lost: Callable[[str], None] | None = field(default=None, repr=False)
    """Called once, from the heartbeat thread, with why, when the heartbeat finds the lease lost
    (taken over, or expired while the store could not be reached): the holder stops its work at
    once rather than when it next looks."""
    listing: tuple[str, ...] = field(default=(), repr=False)
    """The folder's file names at its newest listing (when the lease was taken, or last checked):
    callers read from it what else the folder holds instead of looking again."""
    process: ProcessPlace | None = field(default=None, repr=False)
    """Where the process that took the lease (and heartbeats it) runs, written in the lease file."""

    @classmethod
    def acquire(cls, folder: str, *, ttl: float = 30.0, holder: str | None = None) -> Lease | None:
        """Take the lease on ``folder`` if nobody holds it live; None if someone does.

        Never blocks: callers that want to wait poll, and meanwhile watch for the result the
        holder is producing.
        """
        if ttl <= 0:
            raise ValueError(f"ttl must be > 0, got {ttl}")
        holder = holder or default_holder()
        tokens = _tokens_in(fs.listdir(folder))
        if tokens:
            info = _read(folder, tokens[-1])
            if info is not None and info.live():
                return None  # held (the same test as held(), on the listing already read)
            next_token = tokens[-1] + 1
        else:
            next_token = 1
        expires_at = time.time() + ttl
        process = ProcessPlace.here()
        body = _body(holder, next_token, expires_at, process)
        # The listing just showed the number free; on GCS the write's precondition still refuses
        # it to a contender that created it meanwhile.
        if not fs.create_if_absent(fs.join(folder, _lease_name(next_token)), body, durable=False,
                                   listed_absent=True):
            return None
        # A contender that read an older listing could have created a lower number after a
        # newer one existed; the highest number always wins, so re-check.
        listing = tuple(fs.listdir(folder))
        if _tokens_in(listing)[-1] != next_token:
            return None
        return cls(folder=folder, token=next_token, holder=holder, ttl=ttl, expires_at=expires_at, listing=listing,
                   process=process)

    @property
    def path(self) -> str:
        return fs.join(self.folder, _lease_name(self.token))

    @property
    def gives_up_at(self) -> float:
        """When the lease is given up unless renewed first (its expiry less :func:`give_up_margin`)."""
        return self.expires_at - give_up_margin(self.ttl)

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        """This thread's requests in the block are answered before :attr:`gives_up_at`, or
        :class:`LeaseLost`: a write under the lease never lands once another may have taken it."""
        try:
            with store_deadline(self.gives_up_at):
                yield
        except DeadlineReached as e:
            raise LeaseLost(f"lease {self.token} on {self.folder}: a write under it was not answered before "
                            f"the lease was to be given up ({e})") from e

    def check(self, listing: Iterable[str] | None = None) -> None:
        """Raise :class:`LeaseLost` unless this lease is still the newest and not about to be given
        up (fencing).

        Args:
            listing: the folder's file names, listed by the caller just now (saves listing again).
        """
        if self._lost:
            raise LeaseLost(self._lost)
        now = time.time()
        if now >= self.expires_at:
            raise LeaseLost(f"lease {self.token} on {self.folder} expired before it was renewed")
        if now >= self.gives_up_at:
            raise LeaseLost(f"lease {self.token} on {self.folder} was not renewed in time: it expires in "
                            f"{self.expires_at - now:.1f}s, too soon to write under it")
        with store_deadline(self.gives_up_at):
            listed = listing if listing is not None else fs.listdir(self.folder)
        self.listing = tuple(listed)
        tokens = _tokens_in(self.listing)
        if not tokens or tokens[-1] != self.token:
            newer = tokens[-1] if tokens else None
            raise LeaseLost(f"lease {self.token} on {self.folder} was taken over (newest is {newer})")

    def renew(self) -> None:
        """Push the expiry ``ttl`` seconds ahead; raise :class:`LeaseLost` if it was taken over, an
        ``OSError`` if the store did not answer (by the time the lease is to be given up, at the latest)."""
        # Bounded (rigging.store_requests.DeadlineReached, an OSError, past it): a renewal that
        # landed after the lease was given up would show a live lease nobody holds.
        with store_deadline(self.gives_up_at):
            self.check()
            expires_at = time.time() + self.ttl
            # Not durable: after a machine crash every lease of it is void anyway.
            fs.atomic_write(self.path, _body(self.holder, self.token, expires_at, self.process), durable=False)
        self.expires_at = expires_at

    def start_heartbeat(self, interval: float | None = None) -> None:
        """Renew in a background thread every ``interval`` seconds (default ttl/4).

        A second thread watches the expiry: a renewal stuck on an unreachable store cannot keep
        the holder from learning that the lease is lost (:attr:`on_lost`), :func:`give_up_margin` before
        its expiry, while it still holds it.
        """
        interval = interval if interval is not None else max(self.ttl / 4, 0.05)

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    self.renew()
                except LeaseLost as e:
                    self._mark_lost(str(e))
                    return
                except OSError as e:
                    # A passing storage error: keep trying until the lease is given up (watch_expiry).
                    logger.warning("lease heartbeat on %s failed: %s", self.folder, e)

        def watch_expiry() -> None:
            while not self._stop.wait(min(interval, max(self.gives_up_at - time.time(), 0.0) + 0.01)):
                if self._lost:
                    return
                if time.time() >= self.gives_up_at:
                    self._mark_lost(f"lease {self.token} on {self.folder} could not be renewed in time: given up "
                                    f"{self.expires_at - time.time():.1f}s before its expiry")
                    return

        self._threads = [threading.Thread(target=beat, name=f"lease-{self.token}", daemon=True),
                         threading.Thread(target=watch_expiry, name=f"lease-{self.token}-expiry", daemon=True)]
        for thread in self._threads:
            thread.start()

    def _mark_lost(self, why: str) -> None:
        with self._lost_lock:
            if self._lost:
                return
            self._lost = why
        logger.warning("%s", why)
        if self.on_lost is not None:
            self.on_lost(why)

    def stop_heartbeat(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self._threads = []

    @property
    def lost(self) -> str | None:
        """Why the heartbeat found the lease lost, or None."""
        return self._lost

    def release(self) -> None:
        """Give the lease up so another contender can take it at once."""
        self.stop_heartbeat()
        tokens = _tokens(self.folder)
        if tokens and tokens[-1] == self.token:
            fs.atomic_write(self.path, _body(self.holder, self.token, 0.0, self.process, released=True), durable=False)

    def clear(self) -> None:
        """Give the lease up for good once the folder's result is published: delete every older
        lease file the newest listing showed, and mark this one released.

        This file stays (one request, as deleting it would be), so the next lease on the folder
        takes the next number: a number is never handed out twice (see the module docstring).
        """
        self.stop_heartbeat()
        for token in sorted(t for t in _tokens_in(self.listing) if t < self.token):
            fs.delete(fs.join(self.folder, _lease_name(token)))
        fs.atomic_write(self.path, _body(self.holder, self.token, 0.0, self.process, released=True), durable=False)


def clear_leases(folder: str) -> None:
    """Remove every lease file of ``folder``, so its numbering starts again at 1.

    Only for a folder nobody holds or will come back to (its step's output is being deleted):
    a stalled holder of an old number could otherwise come back as the holder of the newest one.
    """
    for token in _tokens(folder):
        fs.delete(fs.join(folder, _lease_name(token)))
