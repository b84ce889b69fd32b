"""Another runner taking a step's lease over, as tests and benchmarks play it."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass

from rigging import filesystem as fs
from rigging.lease import current_lease
from rigging.pids import ProcessPlace

__all__ = ["TakenLease", "place_elsewhere", "take_over"]


@dataclass(frozen=True)
class TakenLease:
    """The lease file another holder created (the next number after the holder it took over from)."""

    token: int
    path: str
    holder: str

    def release(self) -> None:
        """Give the step up (released), so that a waiting runner takes it again at once."""
        fs.atomic_write(self.path, json.dumps({"holder": self.holder, "token": self.token, "expires_at": 0.0,
                                               "released": True}))


def take_over(meta: str, holder: str = "elsewhere:1:thief", ttl: float = 3600.0) -> TakenLease:
    """Create the next lease number on the step's ``.marin/`` folder ``meta``, as a runner on another
    host would take over an expired lease; it lives ``ttl`` seconds.

    Raises:
        AssertionError: there was no lease to take over, or another holder created that number first.
    """
    info = current_lease(meta)
    assert info is not None, f"no lease on {meta} to take over"
    token = info.token + 1
    path = fs.join(meta, f"lease-{token:08d}.json")
    body = {"holder": holder, "token": token, "expires_at": time.time() + ttl, "released": False}
    assert fs.create_if_absent(path, json.dumps(body)), f"{path} was created by another holder first"
    return TakenLease(token=token, path=path, holder=holder)


def place_elsewhere(output_path: str) -> bool:
    """Make the running step at ``output_path`` look as if its process were on another host (its
    status record names it so), as a step on a frozen machine elsewhere is to the runners here:
    they can neither see it end nor end it. True if a running step's process was named."""
    status = fs.join(output_path, ".marin", "status.json")
    try:
        data = json.loads(fs.read_text(status))
    except (FileNotFoundError, ValueError):
        return False
    worker = data.get("worker")
    if data.get("state") != "running" or not isinstance(worker, str) or ":" not in worker:
        return False
    # Another machine: another host name and another boot (a pid is checked only in its own boot).
    place = ProcessPlace.from_text(worker.split(":", 1)[1])
    elsewhere = dataclasses.replace(place, boot_id="00000000-0000-0000-0000-000000000000") if place else None
    data["worker"] = "another-host:" + (elsewhere.to_text() if elsewhere else worker.split(":", 1)[1])
    fs.atomic_write(status, json.dumps(data, indent=2, sort_keys=True))
    return True
