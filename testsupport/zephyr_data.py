"""Functions that zephyr tests run inside worker processes (importable by module name)."""

from __future__ import annotations

from zephyr.worker_context import current_context


def double(x: int) -> int:
    return 2 * x


def is_even(x: int) -> bool:
    return x % 2 == 0


def repeat(x: int) -> list[int]:
    return [x, x]


def tag_with_context(x: int) -> tuple[int, int, int, str | None]:
    ctx = current_context()
    ctx.increment("seen")
    ctx.increment("total", x)
    return (x, ctx.shard_index, ctx.num_shards, ctx.output_path)


def tag_second(record: tuple) -> tuple:
    current_context().increment("second")
    return record


def fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError("seven is not allowed")
    return x


def as_tokens(x: int) -> tuple[str, list[int]]:
    return ("train" if x % 3 else "validation", list(range(x)))


def with_shard(x: str) -> tuple[str, int, int]:
    ctx = current_context()
    return (x, ctx.shard_index, ctx.num_shards)


def die(x: int) -> int:
    import os

    os._exit(3)


# --- group_by (test_shuffle.py) ---------------------------------------------------------------

WORDS = ["apple", "pear", "fig", "plum", "kiwi", "lime", "date"]


def planted(shards: int = 3, per_shard: int = 30, seed: int = 0) -> list[list[dict]]:
    """Records of ``shards`` shards with words drawn from WORDS (so keys repeat across shards)."""
    import random

    rng = random.Random(seed)
    return [[{"id": f"s{s}-{i}", "word": rng.choice(WORDS), "rank": rng.randrange(4), "pos": i}
             for i in range(per_shard)] for s in range(shards)]


def word_of(record: dict) -> str:
    return record["word"]


def rank_of(record: dict) -> int:
    return record["rank"]


def ids_by_key(key, records) -> list[dict]:
    return [{"key": key, "ids": [r["id"] for r in records]}]


def none_reducer(key, records) -> None:
    return None


def slow_first_shard(record: dict) -> dict:
    """Holds shard 0 back, so that later shards' map tasks finish first."""
    import time

    if current_context().shard_index == 0 and record["pos"] == 0:
        time.sleep(0.5)
    return record


def _die_once(marker: str, wait_for: list[str]) -> None:
    """Kill this process, once (``marker`` remembers), after the files ``wait_for`` exist."""
    import os
    import time

    if os.path.exists(marker):
        return
    deadline = time.monotonic() + 60
    while not all(os.path.exists(p) for p in wait_for):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other tasks never committed: {wait_for}")
        time.sleep(0.05)
    with open(marker, "w") as f:
        f.write("died")
    os._exit(3)


def _other_commits(count: int) -> list[str]:
    import os

    ctx = current_context()
    assert ctx.output_path is not None, "a shard's context names its step's output"
    return [os.path.join(ctx.output_path, ".commits", f"part-{i:05d}.json") for i in range(count) if i != ctx.shard_index]


def die_once_at(marker: str, record_id: str, record: dict) -> dict:
    """A map step that kills its worker at ``record_id`` once every other shard has committed."""
    if record["id"] == record_id:
        _die_once(marker, _other_commits(current_context().num_shards))
    return record


def ids_or_die_once(marker: str, doomed_key: str, key, records) -> list[dict]:
    """``ids_by_key``, killing its worker at ``doomed_key`` once every other partition has committed."""
    if key == doomed_key:
        _die_once(marker, _other_commits(current_context().num_shards))
    return ids_by_key(key, records)


def ids_or_hang(marker: str, key, records) -> list[dict]:
    """``ids_by_key`` that, at the first group, says so in ``marker`` and waits to be killed."""
    import os
    import time

    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("reduce wave started")
        time.sleep(600)
    return ids_by_key(key, records)
