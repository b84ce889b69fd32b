"""zephyr's shuffle (``Dataset.deduplicate``) beside a plain in-memory dict: ``python -m benchmarks.bench_shuffle``.

One run, one corpus: ``RECORDS`` JSON records (about 150 bytes each, ``KEYS`` distinct keys) in
``SHARDS`` JSON-lines files, generated here.

* bare: read every file in this process, keep the first record of each key in a dict, write one
  JSON-lines file: what a single machine does without a shuffle (the baseline).
* copy: zephyr reading the files and writing them to a ``JsonlSink`` in this process, no shuffle:
  zephyr's own cost of reading and writing records, for scale.
* zephyr: ``from_files(...).deduplicate(key, num_partitions=SHARDS).write(JsonlSink)``: map wave
  to partition files, then the reduce wave, every task committed; in this process, and on 1 and
  2 local worker processes (process start-up included, twice: once per wave).
* each side runs ``REPEATS`` times into fresh folders; the best time is reported. Output bytes of
  the three zephyr runs are checked equal (determinism), and the shuffle files' size is given
  beside the input's.
"""

from __future__ import annotations

import json
import operator
import os
import random
import shutil
import string
import tempfile
import time

RECORDS = 100_000
KEYS = 20_000
SHARDS = 8
REPEATS = 2
MODES = {"in process": {"in_process": True}, "1 worker": {"max_parallel": 1}, "2 workers": {"max_parallel": 2}}


def _write_corpus(folder: str) -> int:
    os.makedirs(folder)
    rng = random.Random(0)
    vocabulary = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(2000)]
    size = 0
    for s in range(SHARDS):
        path = os.path.join(folder, f"shard-{s:02d}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for i in range(s, RECORDS, SHARDS):
                text = " ".join(rng.choices(vocabulary, k=20))
                f.write(json.dumps({"id": i, "key": f"k{(i * 7919) % KEYS:05d}", "text": text}) + "\n")
        size += os.path.getsize(path)
    return size


def _bare(corpus: str, out: str) -> None:
    first: dict[str, dict] = {}
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                first.setdefault(record["key"], record)
    os.makedirs(out)
    with open(os.path.join(out, "part-00000.jsonl"), "w", encoding="utf-8") as f:
        for record in first.values():
            f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")


def _zephyr(corpus: str, out: str, **kwargs) -> None:
    from zephyr import Dataset, JsonlSink

    ds = Dataset.from_files(corpus, record_fn=dict).deduplicate(operator.itemgetter("key"), num_partitions=SHARDS)
    ds.write(JsonlSink(out), **kwargs)


def _copy(corpus: str, out: str) -> None:
    from zephyr import Dataset, JsonlSink

    Dataset.from_files(corpus, record_fn=dict).write(JsonlSink(out), in_process=True)


def _outputs(out: str) -> dict[str, bytes]:
    found = {}
    for folder, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if d != ".commits"]
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                found[os.path.relpath(os.path.join(folder, name), out)] = f.read()
    return found


def _best(fn, work: str, label: str, **kwargs) -> tuple[float, str]:
    best = float("inf")
    out = ""
    for k in range(REPEATS):
        out = os.path.join(work, f"{label.replace(' ', '-')}-{k}")
        start = time.perf_counter()
        fn(os.path.join(work, "corpus"), out, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    """Print the side-by-side report (and its JSON on the last line)."""
    work = tempfile.mkdtemp(prefix="bench-shuffle-")
    try:
        input_bytes = _write_corpus(os.path.join(work, "corpus"))
        bare, _ = _best(_bare, work, "bare")
        copy, _ = _best(_copy, work, "copy")
        rows = {}
        outputs = []
        for label, kwargs in MODES.items():
            seconds, out = _best(_zephyr, work, label, **kwargs)
            rows[label] = seconds
            outputs.append(_outputs(out))
        shuffle_bytes = sum(len(b) for rel, b in outputs[0].items() if rel.startswith(".shuffle/"))
        same = all(o == outputs[0] for o in outputs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"shuffle: deduplicate {RECORDS:,} records ({input_bytes / 1e6:.1f} MB, {KEYS:,} keys, {SHARDS} shards "
          f"and partitions), best of {REPEATS}, {os.cpu_count()} cores")
    print(f"{'side':>12} {'seconds':>8} {'records/s':>10} {'bare/side':>9}")
    print(f"{'bare dict':>12} {bare:8.2f} {RECORDS / bare:10.0f} {1:9.0%}")
    print(f"{'copy':>12} {copy:8.2f} {RECORDS / copy:10.0f} {bare / copy:9.0%}")
    for label, seconds in rows.items():
        print(f"{label:>12} {seconds:8.2f} {RECORDS / seconds:10.0f} {bare / seconds:9.0%}")
    print(f"shuffle files {shuffle_bytes / 1e6:.1f} MB (zstd) for {input_bytes / 1e6:.1f} MB of input; "
          f"output bytes equal across the three zephyr runs: {same}")
    print(json.dumps({"records": RECORDS, "bare_s": bare, "copy_s": copy, "zephyr_s": rows, "input_bytes": input_bytes,
                      "shuffle_bytes": shuffle_bytes, "deterministic": same}))


if __name__ == "__main__":
    main()
