"""Hello world: a numbers step writes n numbers, a stats step reads them and writes sum/min/max.

Run it with ``marin run experiments/tutorials/hello_world.py`` or
``python -m experiments.tutorials.hello_world``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from marin.experiment import Step, StepRunner, output_path_of
from rigging import filesystem as fs


@dataclass(frozen=True)
class NumbersConfig:
    """How many numbers to write and from where to start."""

    n: int = 100
    start: int = 0


@dataclass(frozen=True)
class StatsConfig:
    """Where the numbers are."""

    numbers_path: str


def write_numbers(config: NumbersConfig, output_path: str) -> None:
    """Write ``config.n`` numbers, one per line, to ``numbers.txt``."""
    text = "".join(f"{i}\n" for i in range(config.start, config.start + config.n))
    fs.atomic_write(fs.join(output_path, "numbers.txt"), text)


def compute_stats(config: StatsConfig, output_path: str) -> None:
    """Read the numbers and write their sum, min and max to ``stats.json``."""
    values = [int(line) for line in fs.read_text(config.numbers_path).split()]
    stats = {"count": len(values), "sum": sum(values), "min": min(values), "max": max(values)}
    fs.atomic_write(fs.join(output_path, "stats.json"), json.dumps(stats, indent=2))
    print(f"stats: {stats}")


numbers = Step(name="hello/numbers", fn=write_numbers, config=NumbersConfig(n=int(os.environ.get("HELLO_N", "100"))))
stats = Step(name="hello/stats", fn=compute_stats, config=StatsConfig(numbers_path=output_path_of(numbers, "numbers.txt")))

steps = [stats]

if __name__ == "__main__":
    result = StepRunner().run([stats])
    for outcome in result.steps:
        print(f"{outcome.outcome.value:8s} {outcome.name} -> {outcome.output_path}")
    raise SystemExit(0 if result.ok else 1)
