"""What killed or taken-over processes leave behind (attempt folders no record names, shuffle spill
of finished steps, temporary folders of gone processes) and outputs past their ``ttl``: found with
their sizes, never a live step's or a live process's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import steps_for_tests as t

from marin.execution.core.errors import InvalidStep
from marin.execution.core.step import Step
from marin.execution.run.runner import StepRunner
from marin.execution.store.leftovers import (
    ATTEMPT_KIND,
    SHUFFLE_KIND,
    expired_outputs,
    remove_leftovers,
    store_leftovers,
    temp_leftovers,
)
from marin.execution.store.step_record import StepRecord
from marin.execution.store.store import StepStore
from rigging import filesystem as fs
from rigging.lease import Lease
from rigging.tempdirs import FRAY_LOGS, LEVANTER_METRICS, owned_prefix
from testsupport.namespaces import gone_place, of_another_namespace


def _build(prefix: str, *steps: Step) -> dict[str, str]:
    result = StepRunner(prefix=prefix, client=t.InProcessClient(), strict_env=False).run(list(steps))
    assert result.ok, [(s.name, s.error) for s in result.steps]
    return {s.name: s.output_path for s in result.steps}


def _put(path: str, size: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_bytes(b"x" * size)


def _leftovers(prefix: str) -> dict[str, tuple[str, int]]:
    store = StepStore(prefix)
    files = list(fs.walk_files(prefix))
    outputs = {rel.split("/.marin/")[0] for rel, _ in files if "/.marin/" in rel and "/.attempts/" not in rel}
    return {os.path.relpath(left.path, prefix): (left.kind, left.bytes)
            for left in store_leftovers(store, outputs, files)}


def test_attempt_folders_no_record_names_and_spill_of_finished_steps(tmp_path: Path) -> None:
    prefix = str(tmp_path / "store")
    out = _build(prefix, t.node("g/done"))["g/done"]
    name = os.path.relpath(out, prefix)
    _put(f"{out}/.attempts/00000003/out.txt", 100)  # an attempt that lost its lease to the one that published
    _put(f"{out}/.shuffle/doc_reducer/part-00000.shuffle", 40)
    assert _leftovers(prefix) == {f"{name}/.attempts/00000003": (ATTEMPT_KIND, 100),
                                  f"{name}/.shuffle": (SHUFFLE_KIND, 40)}

    # An unfinished step: the attempt its status names may resume; its spill is its work.
    unfinished = f"{prefix}/g/cut-0123456789abcdef"
    record = StepRecord(unfinished)
    fs.atomic_write(record.status, '{"format": 1, "state": "failed", "data": ".attempts/00000009"}')
    _put(f"{unfinished}/.attempts/00000009/part-0", 7)
    _put(f"{unfinished}/.attempts/00000002/part-0", 5)
    _put(f"{unfinished}/.shuffle/x/part-0", 3)
    found = _leftovers(prefix)
    assert found["g/cut-0123456789abcdef/.attempts/00000002"] == (ATTEMPT_KIND, 5)
    assert "g/cut-0123456789abcdef/.attempts/00000009" not in found
    assert "g/cut-0123456789abcdef/.shuffle" not in found

    # A live lease holds the step: nothing of it is touched.
    lease = Lease.acquire(record.meta, ttl=300, holder="otherhost:1:cut")
    assert lease is not None
    assert not any(k.startswith("g/cut-") for k in _leftovers(prefix))
    lease.clear()
    assert "g/cut-0123456789abcdef/.attempts/00000002" in _leftovers(prefix)

    freed = remove_leftovers(store_leftovers(StepStore(prefix), [name], list(fs.walk_files(prefix))))
    assert freed == 140
    assert not os.path.exists(f"{out}/.attempts") or not os.listdir(f"{out}/.attempts")
    assert not os.path.exists(f"{out}/.shuffle")
    assert StepRecord(out).is_done() and Path(out, "out.txt").exists()


def test_temporary_folders_of_gone_processes_only(tmp_path: Path) -> None:
    gone = gone_place()
    _put(str(tmp_path / f"{owned_prefix(FRAY_LOGS, gone)}abc" / "job.log"), 11)
    _put(str(tmp_path / f"{owned_prefix(LEVANTER_METRICS)}def" / "metrics.jsonl"), 13)  # this live process's
    _put(str(tmp_path / f"{FRAY_LOGS}notapid-xyz" / "a"), 1)  # not made by owned_tempdir
    _put(str(tmp_path / "someone-elses" / "a"), 1)
    # A container sharing this /tmp (its pid means nothing here), and a folder named before names
    # said where their pid means something: never taken for leftovers.
    _put(str(tmp_path / f"{owned_prefix(FRAY_LOGS, of_another_namespace(gone))}ghi" / "job.log"), 17)
    _put(str(tmp_path / f"{FRAY_LOGS}{gone.pid}-jkl" / "job.log"), 19)
    found = temp_leftovers(str(tmp_path))
    assert [(os.path.basename(f.path), f.kind, f.bytes) for f in found] == [
        (f"{owned_prefix(FRAY_LOGS, gone)}abc", "job logs", 11)]


def test_ttl_is_recorded_with_the_build_never_hashed_and_expires(tmp_path: Path) -> None:
    plain, short = t.node("g/spill"), Step("g/spill", t.record, t.node("g/spill").config, ttl="1h30m")
    assert short.ttl_s == 5400 and plain.hash == short.hash
    prefix = str(tmp_path / "store")
    out = _build(prefix, short)["g/spill"]
    success = StepRecord(out).read_success()
    assert success is not None and success.ttl_s == 5400
    assert success.expires_at() == pytest.approx(success.finished_at + 5400)
    name = os.path.relpath(out, prefix)
    store = StepStore(prefix)
    assert expired_outputs(store, [name]) == {}
    assert expired_outputs(store, [name], now=success.finished_at + 5401) == {name: success.expires_at()}
    with pytest.raises(InvalidStep, match=r"step 'g/x': ttl must look like 2h, 1h30m"):
        Step("g/x", t.record, ttl="soon")
