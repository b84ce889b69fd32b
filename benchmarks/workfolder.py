"""What the benchmarks that generate a corpus share: their arguments, and the folder they work in."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence

__all__ = ["parse_bench_args", "work_folder"]


def parse_bench_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser``'s arguments from ``argv``; none when it is None (``python -m benchmarks NAME`` calls
    ``main()``: the names on its own command line are not the bench's arguments)."""
    return parser.parse_args(list(argv) if argv is not None else [])


@contextlib.contextmanager
def work_folder(given: str | None, prefix: str) -> Iterator[str]:
    """``given`` (made if missing, and kept: a generated corpus there is reused), else a temporary
    folder named after ``prefix``, removed afterwards."""
    if given:
        os.makedirs(given, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        yield work
