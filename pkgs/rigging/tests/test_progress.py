"""Progress records: written beside an output, throttled, read back, with an ETA from the rate."""

from __future__ import annotations

import json

import pytest

from rigging import filesystem as fs
from rigging.progress import PROGRESS_FILE, ProgressRecord, ProgressWriter, progress_path, read_progress


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("store", ["local", "memory"])
def test_writer_records_count_metrics_and_eta(tmp_path, memory_prefix, store):
    out = str(tmp_path / "out") if store == "local" else f"{memory_prefix}/out"
    clock = _Clock()
    writer = ProgressWriter(out, total=100, unit="step", interval=1.0, clock=clock)
    first = writer.update(10, loss=2.5, tokens_per_s=4000.0)
    assert first is not None and first.eta_s is None  # one point gives no rate
    clock.now += 10.0
    second = writer.update(30, loss=2.0, tokens_per_s=5000.0)
    # 20 steps in 10 s: 70 left take 35 s.
    assert second is not None and second.eta_s == pytest.approx(35.0)
    back = read_progress(out)
    assert back == second
    assert back.metrics == {"loss": 2.0, "tokens_per_s": 5000.0}
    assert back.fraction == pytest.approx(0.3)
    assert progress_path(out) == fs.join(out, PROGRESS_FILE)


def test_writer_throttles_but_always_writes_the_end(tmp_path):
    clock = _Clock()
    writer = ProgressWriter(str(tmp_path), total=5, unit="shard", interval=5.0, clock=clock)
    assert writer.update(1) is not None
    clock.now += 1.0
    assert writer.update(2) is None  # within the interval
    assert read_progress(str(tmp_path)).done == 1
    clock.now += 0.1
    final = writer.update(5)
    assert final is not None and final.done == 5 and final.eta_s == 0.0
    assert read_progress(str(tmp_path)).done == 5


def test_non_finite_metrics_are_left_out(tmp_path):
    writer = ProgressWriter(str(tmp_path), total=3, unit="step", interval=0.0)
    record = writer.update(1, loss=float("nan"), tokens_per_s=10.0)
    assert record.metrics == {"tokens_per_s": 10.0}
    json.loads(fs.read_text(progress_path(str(tmp_path))))  # strict JSON: no NaN written


def test_missing_or_damaged_record_reads_as_none(tmp_path):
    assert read_progress(str(tmp_path)) is None
    fs.atomic_write(progress_path(str(tmp_path)), "{not json")
    assert read_progress(str(tmp_path)) is None
    fs.atomic_write(progress_path(str(tmp_path)), json.dumps({"unit": "step", "done": "x"}))
    assert read_progress(str(tmp_path)) is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"total": -1, "unit": "step"}, "total must be >= 0, got -1"),
    ({"total": 1, "unit": "step", "interval": -2.0}, "interval must be >= 0, got -2.0"),
])
def test_bad_writer_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProgressWriter(str(tmp_path), **kwargs)


def test_record_validates_its_fields():
    with pytest.raises(ValueError, match="unit must be non-empty"):
        ProgressRecord(unit="", done=0, total=1, started_at=0.0, updated_at=0.0)
    with pytest.raises(ValueError, match="done must be >= 0, got -3"):
        ProgressRecord(unit="step", done=-3, total=1, started_at=0.0, updated_at=0.0)


def test_a_failing_store_does_not_stop_the_work(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # the output "folder" is a file: every write fails
    writer = ProgressWriter(str(blocker), total=2, unit="step", interval=0.0)
    assert writer.update(1) is None
    assert writer.update(2) is None
    assert sum("cannot write progress" in r.message for r in caplog.records) == 1
