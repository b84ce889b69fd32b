"""Training a fastText model reproducibly: in a fresh child process whose large allocations are zeroed.

Why a child process. With ``thread=1``, fastText's ``DenseMatrix::uniform`` initialises only the
first of ten blocks of the input matrix (its block size is ``rows * dim / 10``, one block per
thread), and the ``fasttext-numpy2`` build does not zero the buffer first: 90% of the matrix is
whatever the allocator hands back. In one process, a second training reuses the first model's
freed memory and learns something else, or stops with "Encountered NaN" (measured: 0.10.4).

The child pins glibc's mmap threshold (``MALLOC_MMAP_THRESHOLD_``), which stops glibc from raising
it after frees, so every allocation of 128 KiB or more is a fresh ``mmap``: zero-filled by the
kernel. The uninitialised part of the matrix is then zeros, as in upstream fastText (whose
matrices are zero-initialised vectors), and two trainings give the same model bytes.
:data:`MIN_MATRIX_VALUES` keeps the input matrix above that size.

Run as ``python -m marin.processing.quality.fasttext_train <json>`` with
``{"input": <training file>, "output": <model path>, "params": {...}}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

__all__ = ["MIN_MATRIX_VALUES", "train_in_child"]

_MMAP_THRESHOLD = 128 * 1024
MIN_MATRIX_VALUES = _MMAP_THRESHOLD // 4
"""Smallest ``bucket * dim``: the input matrix (float32) must be mmap-sized to come zero-filled."""


def train_in_child(train_file: str, model_file: str, params: dict[str, Any]) -> None:
    """Train ``fasttext.train_supervised(input=train_file, **params)`` in a child; save to ``model_file``.

    Raises:
        RuntimeError: the child failed (its last stderr lines in the message).
    """
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(_MMAP_THRESHOLD)}
    payload = json.dumps({"input": train_file, "output": model_file, "params": params})
    done = subprocess.run([sys.executable, "-m", __name__, payload], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"fastText training failed (exit {done.returncode}): {tail}")


def _main(argv: list[str]) -> None:
    import fasttext  # compiled extension; this module runs as its own process

    job = json.loads(argv[1])
    model = fasttext.train_supervised(input=job["input"], **job["params"])
    model.save_model(job["output"])


if __name__ == "__main__":
    _main(sys.argv)
