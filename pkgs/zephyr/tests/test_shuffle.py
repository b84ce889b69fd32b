"""group_by, deduplicate, count_by: semantics on planted data, byte-identical output whatever the
worker count, hash seed or client (local processes or Ray), and resume after a kill in either wave."""

from __future__ import annotations

import functools
import json
import operator
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rigging import filesystem as fs
from testsupport import zephyr_data as helpers
from zephyr import (
    CollectSink,
    Dataset,
    JsonlSink,
    ShardFailed,
    WorkerContext,
    encode_json,
    run,
    stable_hash,
)

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def _partitions(ds: Dataset) -> list[list]:
    """Each output shard's records (run in this process)."""
    return [shard["records"] for shard in run(ds, CollectSink(), in_process=True).shard_records]


def _collect(ds: Dataset) -> list:
    return [record for part in _partitions(ds) for record in part]


def _data_files(folder: str) -> dict[str, bytes]:
    """Every file below ``folder`` but commit records (they name absolute paths), by relative path."""
    return {rel: fs.read_bytes(fs.join(folder, rel)) for rel, _size in fs.walk_files(folder)
            if ".commits" not in rel.split("/")}


def _grouped(work: str, **kwargs) -> Dataset:
    return Dataset.from_items(helpers.planted()).group_by(helpers.word_of, helpers.ids_by_key, num_partitions=3,
                                                   work_path=work, **kwargs)


def test_stable_hash_is_of_the_canonical_encoding_and_pinned() -> None:
    assert encode_json({"b": [1, "é", None], "a": 1.5}) == '{"a":1.5,"b":[1,"é",null]}'.encode()
    assert stable_hash(("a", 1)) == stable_hash(["a", 1])
    assert stable_hash({"x": 1, "y": 2}) == stable_hash({"y": 2, "x": 1})
    assert len({stable_hash(1), stable_hash(1.0), stable_hash(True), stable_hash("1")}) == 4
    # Pinned: a change of encoding or hash function would move every record to another partition.
    assert stable_hash("apple") == 1752910112140828095
    assert stable_hash(["doc", 7]) == 5508587436167724430
    with pytest.raises(TypeError, match="a key must be a JSON value, got bytes"):
        stable_hash(b"raw")
    with pytest.raises(ValueError, match="a key must be a JSON value, got float"):
        stable_hash(float("nan"))


def test_group_by_brings_each_key_together_in_input_order(tmp_path: Path) -> None:
    planted = helpers.planted()
    expected: dict[str, list[str]] = {}
    for shard in planted:
        for record in shard:
            expected.setdefault(record["word"], []).append(record["id"])
    parts = _partitions(_grouped(str(tmp_path)))
    assert len(parts) == 3
    for j, part in enumerate(parts):
        keys = [group["key"] for group in part]
        assert all(stable_hash(k) % 3 == j for k in keys)
        assert keys == sorted(keys, key=encode_json)
    assert {g["key"]: g["ids"] for part in parts for g in part} == expected
    assert sum(len(part) for part in parts) == len(expected)


def test_sort_within_orders_each_group_with_ties_in_input_order(tmp_path: Path) -> None:
    ranks = {r["id"]: r["rank"] for shard in helpers.planted() for r in shard}
    parts = _partitions(_grouped(str(tmp_path), sort_within=helpers.rank_of))
    plain = {g["key"]: g["ids"] for part in _partitions(_grouped(str(tmp_path / "plain"))) for g in part}
    for group in (g for part in parts for g in part):
        assert group["ids"] == sorted(plain[group["key"]], key=ranks.__getitem__)


def test_deduplicate_keeps_the_first_record_and_count_by_counts(tmp_path: Path) -> None:
    planted = helpers.planted()
    records = [r for shard in planted for r in shard]
    ds = Dataset.from_items(planted)
    kept = _collect(ds.deduplicate(helpers.word_of, work_path=str(tmp_path)))
    first = {}
    for r in records:
        first.setdefault(r["word"], r)
    assert sorted(kept, key=helpers.word_of) == sorted(first.values(), key=helpers.word_of)
    lowest = ds.deduplicate(helpers.word_of, sort_within=helpers.rank_of, work_path=str(tmp_path), name="lowest")
    best = {}
    for r in records:
        if r["word"] not in best or r["rank"] < best[r["word"]]["rank"]:
            best[r["word"]] = r
    assert sorted(_collect(lowest), key=helpers.word_of) == sorted(best.values(), key=helpers.word_of)
    counts = _collect(ds.count_by(helpers.word_of, num_partitions=2, work_path=str(tmp_path)))
    assert {c["key"]: c["count"] for c in counts} == Counter(r["word"] for r in records)
    assert len(counts) == len(set(helpers.WORDS) & {r["word"] for r in records})


def test_stages_chain_through_transforms(tmp_path: Path) -> None:
    # Each word's first record, then how many first records each rank has: two stages, one run.
    ds = (Dataset.from_items(helpers.planted()).deduplicate(helpers.word_of, num_partitions=2)
          .map(helpers.tag_second).count_by(helpers.rank_of, num_partitions=2))
    out = str(tmp_path / "out")
    result = ds.write(JsonlSink(out), in_process=True)
    first: dict[str, dict] = {}
    for r in (r for shard in helpers.planted() for r in shard):
        first.setdefault(r["word"], r)
    got = {c["key"]: c["count"] for p in sorted(Path(out).glob("part-*.jsonl")) for c in map(json.loads, p.open())}
    assert got == Counter(r["rank"] for r in first.values())
    assert [len(w.shard_records) for w in result.shuffles] == [3, 2]  # deduplicate's map tasks, then count_by's
    assert result.shuffles[1].counters == {"second": len(first)}
    assert sorted(os.listdir(Path(out) / ".shuffle")) == ["count_by", "deduplicate"]


def test_bad_arguments_and_records_are_named(tmp_path: Path) -> None:
    ds = Dataset.from_items([[{"word": "a"}], [{"word": b"raw"}]])
    with pytest.raises(ValueError, match="num_partitions must be > 0, got 0"):
        ds.group_by(helpers.word_of, helpers.ids_by_key, num_partitions=0)
    with pytest.raises(ValueError, match="a group_by name must be a plain folder name, got 'a/b'"):
        ds.group_by(helpers.word_of, helpers.ids_by_key, name="a/b")
    with pytest.raises(ValueError, match="group_by stage 'count_by' needs a work_path"):
        ds.count_by(helpers.word_of).collect()
    twice = ds.count_by(helpers.word_of, work_path=str(tmp_path)).count_by(helpers.word_of, work_path=str(tmp_path))
    with pytest.raises(ValueError, match="two group_by stages of one pipeline write to .*count_by"):
        twice.collect()
    with pytest.raises(ShardFailed, match="map task: shard 1 of 2 failed: TypeError: a group_by key must be a JSON "
                                          "value, got bytes"):
        ds.count_by(helpers.word_of, work_path=str(tmp_path / "bytes")).write(JsonlSink(str(tmp_path / "o")),
                                                                            in_process=True)
    nothing = Dataset.from_items([[{"word": "a"}]]).group_by(helpers.word_of, helpers.none_reducer,
                                                             work_path=str(tmp_path / "none"))
    with pytest.raises(ShardFailed, match="reducer testsupport.zephyr_data.none_reducer returned None for key \"a\""):
        nothing.write(JsonlSink(str(tmp_path / "none-out")), in_process=True)
    with pytest.raises(RuntimeError, match="partition 0 of group_by stage 'count_by' exists only while the pipeline"):
        list(ds.count_by(helpers.word_of).iter_shard(WorkerContext(shard_index=0, num_shards=2)))


def test_a_damaged_map_output_is_redone_or_reported(tmp_path: Path) -> None:
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    _grouped(work).write(JsonlSink(out), in_process=True)
    stage = tmp_path / "work/.shuffle/group_by"
    # Offsets that no longer tile the file: the commit does not count, the task is redone.
    commit = stage / ".commits/part-00001.json"
    record = json.loads(commit.read_text())
    record["files"][""]["partitions"][0][1] += 1
    commit.write_text(json.dumps(record))
    again = _grouped(work).write(JsonlSink(str(tmp_path / "again")), in_process=True)
    assert again.shuffles[0].written == (1,) and again.shuffles[0].reused == (0, 2)
    # Same size, other bytes: the commit stands, and the zstd checksum catches it when read.
    data = stage / "part-00002.shuffle"
    damaged = bytearray(data.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    data.write_bytes(bytes(damaged))
    with pytest.raises(ShardFailed, match=r"part-00002\.shuffle: bytes \d+-\d+: damaged shuffle partition"):
        _grouped(work).write(JsonlSink(str(tmp_path / "third")), in_process=True)


def test_map_outputs_are_reused_only_for_the_same_key_and_partition_count(tmp_path: Path) -> None:
    work = str(tmp_path)

    def waves(key, partitions: int) -> tuple:
        ds = Dataset.from_items(helpers.planted()).count_by(key, num_partitions=partitions, work_path=work)
        wave = run(ds, CollectSink(), in_process=True).shuffles[0]
        return wave.written, wave.reused

    assert waves(helpers.word_of, 3) == ((0, 1, 2), ())
    assert waves(helpers.word_of, 3) == ((), (0, 1, 2))
    assert waves(helpers.rank_of, 3) == ((0, 1, 2), ())  # same stage folder, another key: redone
    assert waves(helpers.rank_of, 2) == ((0, 1, 2), ())
    assert waves(operator.itemgetter("word"), 2) == ((0, 1, 2), ())
    assert waves(operator.itemgetter("word"), 2) == ((), (0, 1, 2))


def test_output_bytes_do_not_depend_on_worker_count_or_finish_order(tmp_path: Path) -> None:
    # Shard 0's map task is held back, so with two workers the others finish first.
    ds = Dataset.from_items(helpers.planted()).map(helpers.slow_first_shard)
    outputs = []
    for label, kwargs in [("one", {"max_parallel": 1}), ("two", {"max_parallel": 2}), ("here", {"in_process": True})]:
        out = str(tmp_path / label)
        ds.group_by(helpers.word_of, helpers.ids_by_key, num_partitions=3).write(JsonlSink(out), **kwargs)
        outputs.append(_data_files(out))
    assert outputs[0] == outputs[1] == outputs[2]
    assert len([p for p in outputs[0] if p.startswith(".shuffle/group_by/part-")]) == 3


_SEED_DRIVER = """
import sys
from zephyr import Dataset, JsonlSink
from testsupport import zephyr_data as helpers
records = [[{"id": f"{s}-{i}", "word": f"w{(s * 7 + i * 3) % 23}", "pos": i} for i in range(40)] for s in range(3)]
ds = Dataset.from_items(records).group_by(helpers.word_of, helpers.ids_by_key, num_partitions=4)
ds.write(JsonlSink(sys.argv[1]), in_process=True)
"""


def test_output_bytes_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    outputs = []
    for seed in ("1", "2"):
        out = str(tmp_path / f"seed-{seed}")
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": TESTS_DIR}
        subprocess.run([sys.executable, "-c", _SEED_DRIVER, out], env=env, check=True, timeout=120)
        outputs.append(_data_files(out))
    assert outputs[0] == outputs[1]
    assert sum(1 for p in outputs[0] if p.endswith(".jsonl")) == 4


def test_on_memory_store_as_on_local_disk(tmp_path: Path, memory_prefix: str) -> None:
    local = str(tmp_path / "out")
    _grouped(str(tmp_path / "work")).write(JsonlSink(local), in_process=True)
    remote = fs.join(memory_prefix, "out")
    first = _grouped(fs.join(memory_prefix, "work")).write(JsonlSink(remote))  # memory:// runs in this process
    assert _data_files(remote) == _data_files(local)
    assert fs.exists(fs.join(memory_prefix, "work/.shuffle/group_by/.commits/part-00002.json"))
    again = _grouped(fs.join(memory_prefix, "work")).write(JsonlSink(remote))
    assert (first.shuffles[0].written, again.shuffles[0].reused, again.reused) == ((0, 1, 2), (0, 1, 2), (0, 1, 2))


# --- resume after a kill ----------------------------------------------------------------------

def _reference(tmp_path: Path) -> dict[str, bytes]:
    out = str(tmp_path / "reference")
    _grouped(str(tmp_path / "reference-work")).write(JsonlSink(out), in_process=True)
    return {p: b for p, b in _data_files(out).items() if not p.startswith(".shuffle/")}


def test_a_killed_map_task_is_redone_alone_and_its_leftovers_replaced(tmp_path: Path) -> None:
    marker, work, out = str(tmp_path / "died"), str(tmp_path / "work"), str(tmp_path / "out")
    killer = functools.partial(helpers.die_once_at, marker, "s1-12")
    ds = Dataset.from_items(helpers.planted()).map(killer).group_by(helpers.word_of, helpers.ids_by_key,
                                                              num_partitions=3, work_path=work)
    with pytest.raises(ShardFailed, match="group_by 'group_by' map task: shards 1-1 of 3 failed"):
        ds.write(JsonlSink(out), max_parallel=3)
    stage = Path(work) / ".shuffle/group_by"
    assert sorted(p.name for p in (stage / ".commits").iterdir()) == ["part-00000.json", "part-00002.json"]
    (stage / "part-00001.shuffle").write_bytes(b"half a map output")  # as a killed upload might leave
    (stage / ".tmp-0123-part-00001.shuffle").write_bytes(b"partial")
    result = ds.write(JsonlSink(out), max_parallel=3)
    assert (result.shuffles[0].written, result.shuffles[0].reused, result.written) == ((1,), (0, 2), (0, 1, 2))
    assert not list(stage.glob(".tmp-*"))
    assert {p: b for p, b in _data_files(out).items() if not p.startswith(".shuffle/")} == _reference(tmp_path)


def test_a_killed_reduce_task_is_redone_alone(tmp_path: Path) -> None:
    marker, work, out = str(tmp_path / "died"), str(tmp_path / "work"), str(tmp_path / "out")
    doomed = "fig"
    reducer = functools.partial(helpers.ids_or_die_once, marker, doomed)
    ds = Dataset.from_items(helpers.planted()).group_by(helpers.word_of, reducer, num_partitions=3, work_path=work)
    partition = stable_hash(doomed) % 3
    with pytest.raises(ShardFailed, match=f"shards {partition}-{partition} of 3 failed"):
        ds.write(JsonlSink(out), max_parallel=3)
    result = ds.write(JsonlSink(out), max_parallel=3)
    assert (result.shuffles[0].written, result.shuffles[0].reused) == ((), (0, 1, 2))
    assert (result.written, result.reused) == ((partition,), tuple(j for j in range(3) if j != partition))
    assert _data_files(out) == _reference(tmp_path)


_KILLED_DRIVER = """
import functools, sys
from zephyr import Dataset, JsonlSink
from testsupport import zephyr_data as helpers
reducer = functools.partial(helpers.ids_or_hang, sys.argv[3])
ds = Dataset.from_items(helpers.planted()).group_by(helpers.word_of, reducer, num_partitions=3, work_path=sys.argv[1])
ds.write(JsonlSink(sys.argv[2]), in_process=True)
"""


def test_a_driver_killed_between_the_waves_resumes_with_the_reduce_wave(tmp_path: Path) -> None:
    work, out, marker = str(tmp_path / "work"), str(tmp_path / "out"), tmp_path / "reducing"
    env = {**os.environ, "PYTHONPATH": TESTS_DIR}
    driver = subprocess.Popen([sys.executable, "-c", _KILLED_DRIVER, work, out, str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert driver.poll() is None, f"the driver exited with {driver.returncode} before reducing"
            assert time.monotonic() < deadline, "the driver never reached the reduce wave"
            time.sleep(0.05)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    reducer = functools.partial(helpers.ids_or_hang, str(marker))
    ds = Dataset.from_items(helpers.planted()).group_by(helpers.word_of, reducer, num_partitions=3, work_path=work)
    result = ds.write(JsonlSink(out), in_process=True)
    assert (result.shuffles[0].written, result.shuffles[0].reused) == ((), (0, 1, 2))
    assert result.written == (0, 1, 2)
    assert _data_files(out) == _reference(tmp_path)


# --- Ray --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ray_and_local_processes_write_the_same_bytes(tmp_path: Path, ray_client) -> None:
    # Functions that Ray's workers can import (the tests folder is not on their path).
    by_id, by_word = operator.itemgetter("id"), operator.itemgetter("word")
    planted = helpers.planted()
    planted[2] = planted[2] + planted[0][:10]  # duplicates for deduplicate to drop
    ds = Dataset.from_items(planted).deduplicate(by_id, num_partitions=2).count_by(by_word, num_partitions=3)
    local, remote = str(tmp_path / "local"), str(tmp_path / "ray")
    ds.write(JsonlSink(local), max_parallel=2)
    result = ds.write(JsonlSink(remote), client=ray_client, max_parallel=2)
    assert _data_files(remote) == _data_files(local)
    assert [len(w.written) for w in result.shuffles] == [3, 2] and result.written == (0, 1, 2)
    counts = [json.loads(line) for p in sorted(Path(remote).glob("part-*.jsonl")) for line in p.open()]
    assert sum(c["count"] for c in counts) == 90
