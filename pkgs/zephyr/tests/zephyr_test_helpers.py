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
