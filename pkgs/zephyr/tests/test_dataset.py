"""The lazy dataset: transforms, shards on real worker processes, counters, failures."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import pytest

from testsupport import zephyr_data as helpers
from zephyr import Dataset, ShardFailed, WorkerContext, current_context


def _shard(ds: Dataset, i: int) -> list:
    return list(ds.iter_shard(WorkerContext(shard_index=i, num_shards=ds.num_shards)))


def test_transforms_apply_per_shard_in_order() -> None:
    ds = Dataset.from_items([range(10), range(10, 13)])
    assert _shard(ds.map(helpers.double), 1) == [20, 22, 24]
    assert _shard(ds.filter(helpers.is_even), 0) == [0, 2, 4, 6, 8]
    assert _shard(ds.flat_map(helpers.repeat), 1) == [10, 10, 11, 11, 12, 12]
    assert _shard(ds.take_per_shard(4), 0) == [0, 1, 2, 3]
    assert _shard(ds.take_per_shard(4), 1) == [10, 11, 12]
    assert _shard(ds.batch(4), 0) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    chained = ds.filter(helpers.is_even).map(helpers.double).take_per_shard(2).batch(5)
    assert _shard(chained, 0) == [[0, 4]]


def test_datasets_are_lazy_and_immutable() -> None:
    base = Dataset.from_items([[1, 2, 3]])
    mapped = base.map(helpers.fail_on_seven)  # would fail on 7, never runs here
    assert _shard(base, 0) == [1, 2, 3]
    assert mapped is not base


def test_arguments_are_validated() -> None:
    ds = Dataset.from_items([[1]])
    with pytest.raises(ValueError, match="batch size must be > 0, got 0"):
        ds.batch(0)
    with pytest.raises(ValueError, match="count must be >= 0, got -1"):
        ds.take_per_shard(-1)
    with pytest.raises(ValueError, match="at least one shard, got 0"):
        Dataset.from_items([])
    with pytest.raises(ValueError, match="num_shards must be > 0, got 0"):
        WorkerContext(shard_index=0, num_shards=0)
    with pytest.raises(ValueError, match="max_parallel must be > 0, got 0"):
        ds.collect(max_parallel=0)


def test_current_context_outside_a_shard_raises() -> None:
    with pytest.raises(RuntimeError, match="no zephyr shard is running"):
        current_context()


def test_shards_run_in_worker_processes_with_context_and_summed_counters() -> None:
    ds = Dataset.from_items([[1, 2], [3], [4, 5, 6]]).map(helpers.tag_with_context)
    records = ds.collect(max_parallel=2)
    assert records == [(1, 0, 3, None), (2, 0, 3, None), (3, 1, 3, None), (4, 2, 3, None), (5, 2, 3, None),
                       (6, 2, 3, None)]
    from zephyr import CollectSink, run

    result = run(ds, CollectSink(), max_parallel=3)
    assert result.counters == {"seen": 6, "total": 21}
    assert result.written == (0, 1, 2) and result.reused == ()


def test_a_failing_shard_names_the_shard_and_the_error() -> None:
    ds = Dataset.from_items([[1, 2], [6, 7, 8]]).map(helpers.fail_on_seven)
    with pytest.raises(ShardFailed, match=r"shard 1 of 2 failed: ValueError: seven is not allowed") as info:
        ds.collect(max_parallel=2)
    assert info.value.shard_index == 1


def test_memory_paths_run_in_process(memory_prefix: str) -> None:
    from rigging import filesystem as fs

    fs.atomic_write(fs.join(memory_prefix, "a.txt"), "x\ny\n")
    fs.atomic_write(fs.join(memory_prefix, "b.txt"), "z\n")
    ds = Dataset.from_files(fs.join(memory_prefix, "*.txt")).map(helpers.with_shard)
    assert ds.collect() == [("x", 0, 2), ("y", 0, 2), ("z", 1, 2)]


def test_from_files_shards_one_per_file_or_as_asked(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("".join(f"{i}-{j}\n" for j in range(10)))
    assert Dataset.from_files(str(tmp_path)).num_shards == 3
    two = Dataset.from_files(str(tmp_path), num_shards=2)
    assert [len(_shard(two, i)) for i in range(2)] == [10, 20]
    five = Dataset.from_files(str(tmp_path), num_shards=5)
    assert sum((_shard(five, i) for i in range(5)), []) == [f"{i}-{j}" for i in range(3) for j in range(10)]
    capped = Dataset.from_files(str(tmp_path), num_shards=5).take_per_shard(2)
    assert [len(_shard(capped, i)) for i in range(5)] == [2] * 5


def test_partial_functions_travel_to_workers() -> None:
    ds = Dataset.from_items([[1, 2]]).map(functools.partial(pow, 2))
    assert ds.collect() == [2, 4]


def test_a_worker_that_dies_is_reported_with_its_shards() -> None:
    ds = Dataset.from_items([[1], [2]]).map(helpers.die)
    with pytest.raises(ShardFailed, match=r"shards 0-0 of 2 failed: .*exit code 3|shards 1-1 of 2 failed: .*exit code 3"):
        ds.collect(max_parallel=2)


# --- several shards in one process (Dataset.run_shards, as a worker or in_process=True runs them)

def _stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "zephyr-stage"]


def test_a_failing_shard_in_process_leaves_the_earlier_shards_committed(tmp_path: Path) -> None:
    from zephyr import JsonlSink

    ds = Dataset.from_items([[1], [2], [7], [3]]).prefetch(1).map(helpers.fail_on_seven).prefetch(1)
    with pytest.raises(ShardFailed, match=r"shard 2 of 4 failed: ValueError: seven is not allowed") as info:
        ds.write(JsonlSink(str(tmp_path / "out")), in_process=True)
    assert info.value.shard_index == 2
    assert sorted(p.name for p in (tmp_path / "out/.commits").glob("part-*")) == ["part-00000.json", "part-00001.json"]
    assert not _stage_threads()


@pytest.mark.parametrize("in_process", [True, False])
def test_write_reports_shards_done_as_they_finish(tmp_path: Path, in_process: bool) -> None:
    from zephyr import JsonlSink

    ds = Dataset.from_items([[1], [2], [3], [4]])
    seen: list[tuple[int, int]] = []
    out = str(tmp_path / "out")
    ds.write(JsonlSink(out), in_process=in_process, max_parallel=2, progress=lambda d, t: seen.append((d, t)))
    # In process every shard counts on its own; on workers each worker's group of two at once.
    assert seen == ([(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)] if in_process else [(0, 4), (2, 4), (4, 4)])
    seen.clear()
    ds.write(JsonlSink(out), in_process=in_process, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(4, 4)]  # a rerun finds every shard committed
