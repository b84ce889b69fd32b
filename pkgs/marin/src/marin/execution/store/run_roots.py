"""How runs and ``marin gc`` exclude each other, as Nix's builds and garbage collector do: a run
that will read the store holds a *temporary root* naming every output it planned until it ends,
and a collection removes only under the store's collection lease, sparing what those roots name.

* A collection takes the lease of ``<prefix>/.marin/gc/`` (:mod:`rigging.lease`: each collection
  takes the next number, so the newest number says which collection came last), then reads the
  live runs' roots and removes, checking its lease before each removal.
* A run looks at that lease before it plans: while a collection holds it, the run waits; it notes
  the newest number. Having planned, a run with something to do writes its root
  (``<prefix>/.marin/runs/<id>.json``: holder, expiry renewed by a heartbeat, outputs) and looks at
  the lease again: a newer number means a collection started since the run looked, one that may
  have removed what the plan took for built without seeing the root: the run waits for it to end
  and plans again. So does a run before it adds what a built step expands into.
* Each side writes before it reads what the other wrote (the collection its lease, the run its
  root), so one of them always sees the other: a collection that did not see a run's root started
  after the run looked, and the run plans again.

A run with nothing to do (a no-op) writes nothing: it only looks at the lease (one listing).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from marin.execution.store.layout import META_DIR
from rigging import filesystem as fs
from rigging.lease import Lease, default_holder, held
from rigging.pids import ProcessPlace, holder_live

__all__ = ["GC_LOCK_DIR", "RUNS_DIR", "CollectionBusy", "LiveRun", "RunRoot", "collection_lock", "dead_run_roots",
           "live_runs", "runs_kept"]

logger = logging.getLogger(__name__)

RUNS_DIR = f"{META_DIR}/runs"
"""``<prefix>/.marin/runs/<id>.json``: one run's temporary root."""
GC_LOCK_DIR = f"{META_DIR}/gc"
"""``<prefix>/.marin/gc/``: the lease a collection holds while it removes."""
_POLL_S = 0.2


class CollectionBusy(RuntimeError):
    """Another collection holds the store's collection lease."""


@dataclass(frozen=True)
class LiveRun:
    """A run's temporary root: who holds it, until when, the outputs it names, and where its
    process runs (None: a root that does not say, judged by its expiry alone)."""

    id: str
    holder: str
    expires_at: float
    outputs: frozenset[str]
    process: ProcessPlace | None = None

    def live(self, now: float | None = None) -> bool:
        """Not expired, and its process not known gone (:meth:`rigging.pids.ProcessPlace.gone`: never
        from a failed signal, so a run in another container or PID namespace keeps its root)."""
        return holder_live(self.expires_at, self.process, now)


def _runs_folder(prefix: str) -> str:
    return fs.join(prefix, RUNS_DIR)


def _read_root(path: str) -> LiveRun | None:
    """The temporary root at ``path``; None when it is gone.

    Raises:
        ValueError: it is damaged (a run's root must never read as keeping nothing).
    """
    try:
        data = json.loads(fs.read_bytes(path))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"temporary GC root {path} is unreadable") from None
    outputs, expires, holder = (data.get(k) if isinstance(data, dict) else None
                                for k in ("outputs", "expires_at", "holder"))
    if not (isinstance(outputs, list) and all(isinstance(o, str) for o in outputs)
            and isinstance(expires, int | float) and not isinstance(expires, bool) and isinstance(holder, str)):
        raise ValueError(f"temporary GC root {path} is not a run's root")
    return LiveRun(path.rpartition("/")[2].removesuffix(".json"), holder, float(expires), frozenset(outputs),
                   ProcessPlace.from_json(data.get("process")))


def _roots(prefix: str) -> list[tuple[str, LiveRun]]:
    found = []
    for name in fs.listdir(_runs_folder(prefix)):
        if name.endswith(".json") and not name.startswith("."):  # not a writer's temporary file
            path = fs.join(_runs_folder(prefix), name)
            root = _read_root(path)
            if root is not None:
                found.append((path, root))
    return found


def live_runs(prefix: str) -> list[LiveRun]:
    """The runs of the store at ``prefix`` whose temporary root is live.

    Raises:
        ValueError: a root is damaged.
    """
    return [root for _path, root in _roots(prefix) if root.live()]


def runs_kept(prefix: str) -> frozenset[str]:
    """Every output a live run's temporary root names (read it holding :func:`collection_lock`)."""
    return frozenset(o for root in live_runs(prefix) for o in root.outputs)


def dead_run_roots(prefix: str) -> list[tuple[str, int]]:
    """The temporary roots of runs that are gone without removing them (killed: their expiry
    passed), with their sizes: leftovers a collection removes."""
    found = []
    for path, root in _roots(prefix):
        if not root.live():
            found.append((path, fs.size(path)))
    return found


@contextlib.contextmanager
def collection_lock(prefix: str, *, ttl: float = 30.0) -> Iterator[Lease]:
    """Hold the store's collection lease for the ``with`` block; check it (``lease.check()``)
    before each removal: a collection that lost it (stalled past its expiry) removes no more.

    Raises:
        CollectionBusy: another collection holds it.
    """
    folder = fs.join(prefix, GC_LOCK_DIR)
    lease = Lease.acquire(folder, ttl=ttl)
    if lease is None:
        other = held(folder)
        raise CollectionBusy(f"another `marin gc` is removing from {prefix} ({other.holder if other else '?'}); "
                             "run it again when that one has ended")
    lease.start_heartbeat()
    try:
        yield lease
    finally:
        lease.release()


def _newest_collection(prefix: str) -> int:
    """The number of the newest collection lease of the store (0: none ever), from one listing."""
    names = fs.listdir(fs.join(prefix, GC_LOCK_DIR))
    tokens = [int(n[6:14]) for n in names if n.startswith("lease-") and n[6:14].isdigit()]
    return max(tokens, default=0)


class RunRoot:
    """A run's temporary root (see the module docstring): :meth:`before_planning`, then
    :meth:`hold` what it planned (again when a collection came in between), :meth:`end`."""

    def __init__(self, prefix: str, *, ttl: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                 on_wait: Callable[[str], None] | None = None):
        self.prefix = prefix
        self.path = fs.join(_runs_folder(prefix), f"{int(time.time())}-{uuid.uuid4().hex[:12]}.json")
        self.ttl = ttl
        self.holder = default_holder()
        self.process = ProcessPlace.here()
        self.outputs: set[str] = set()
        # Held while the root is built and written: a heartbeat that built its body before outputs
        # were added cannot land after the write that added them (a collection would miss them).
        self._lock = threading.Lock()
        self._sleep = sleep
        self._on_wait = on_wait
        self._seen = 0
        self._written = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.waited = False
        """Whether a collection made this run wait."""

    def before_planning(self) -> None:
        """Wait while a collection removes; note which collection came last (one listing when none
        removes now)."""
        folder = fs.join(self.prefix, GC_LOCK_DIR)
        while True:
            self._seen = _newest_collection(self.prefix)
            if self._seen == 0:
                return
            collection = held(folder)
            if collection is None:
                return
            if self._on_wait is not None and not self.waited:
                self._on_wait(collection.holder)
            self.waited = True
            while held(folder) is not None:
                self._sleep(_POLL_S)

    def hold(self, outputs: Iterable[str]) -> bool:
        """Name ``outputs`` (with those named before) in the root, written now; False when a
        collection started since :meth:`before_planning`: the plan may rest on removed outputs,
        so wait (:meth:`before_planning`) and plan again."""
        with self._lock:
            new = set(outputs) - self.outputs
            if new or not self._written:
                self.outputs |= new
                self._write()
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name="run-root", daemon=True)
            self._beat.start()
        return _newest_collection(self.prefix) == self._seen

    @contextlib.contextmanager
    def planning_more(self) -> Iterator[None]:
        """For a plan made while the run runs (what a built step expands into): waits while a
        collection removes, before the block; the block ends with :meth:`hold`."""
        self.before_planning()
        yield

    def _write(self) -> None:
        """Write the root as it is now (hold :attr:`_lock`)."""
        body: dict[str, object] = {"holder": self.holder, "expires_at": time.time() + self.ttl,
                                   "outputs": sorted(self.outputs)}
        if self.process is not None:
            body["process"] = self.process.to_json()
        fs.atomic_write(self.path, json.dumps(body), durable=False)
        self._written = True

    def _heartbeat(self) -> None:
        while not self._stop.wait(max(self.ttl / 4, 0.05)):
            try:
                with self._lock:
                    self._write()
            except OSError as e:  # a passing storage error: try again at the next beat
                logger.warning("temporary GC root %s not renewed: %s", self.path, e)

    def end(self) -> None:
        """Let go: the run ended (its persistent root, if any, keeps what it should)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self._written:
            fs.delete(self.path)
