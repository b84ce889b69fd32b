"""Fixtures: small tokenized datasets in the ``marin.tokenized/v1`` layout, written with array_record."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

# Tests run with --import-mode=importlib, so the shared helper module beside them (also imported
# by the trainer subprocesses) is put on the path explicitly; its name is package-specific.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


def write_tokenized(root: str, splits: dict[str, Sequence[Sequence[int]]], *, vocab_size: int,
                    eos_id: int, docs_per_shard: int = 1_000_000) -> str:
    """Write ``splits`` (split name -> documents of token ids) under ``root``; return ``root``."""
    index = {"format": "marin.tokenized/v1", "vocab_size": vocab_size, "eos_id": eos_id, "splits": {}}
    for split, docs in splits.items():
        os.makedirs(os.path.join(root, split), exist_ok=True)
        shards = []
        for shard_no, start in enumerate(range(0, len(docs), docs_per_shard)):
            rel = f"{split}/part-{shard_no:05d}.array_record"
            writer = ArrayRecordWriter(os.path.join(root, rel), "group_size:1")
            chunk = docs[start:start + docs_per_shard]
            for doc in chunk:
                writer.write(np.asarray(doc, "<u4").tobytes())
            writer.close()
            data = open(os.path.join(root, rel), "rb").read()
            shards.append({"path": rel, "records": len(chunk), "tokens": sum(map(len, chunk)),
                           "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        index["splits"][split] = {"records": len(docs), "tokens": sum(map(len, docs)), "shards": shards}
    with open(os.path.join(root, "index.json"), "w") as f:
        json.dump(index, f)
    return root


def pattern_documents(n: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Documents with learnable structure (arithmetic runs) so the loss can fall in a few steps."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        start, stride, length = rng.integers(1, vocab_size - 1), rng.integers(1, 4), rng.integers(5, 40)
        docs.append([int(1 + (start + stride * i) % (vocab_size - 1)) for i in range(length)])
    return docs


@pytest.fixture
def tiny_dataset(tmp_path) -> str:
    """A 64-token vocabulary dataset with train and validation splits (two train shards)."""
    return write_tokenized(str(tmp_path / "tok"), {
        "train": pattern_documents(200, 64, seed=1),
        "validation": pattern_documents(40, 64, seed=2),
    }, vocab_size=64, eos_id=0, docs_per_shard=120)


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    """Share compiled programs between the many identical tiny runs (and their subprocesses).

    Compilation dominates these runs on a small CPU; caching does not change what runs.
    """
    import jax

    cache = str(tmp_path_factory.mktemp("jax-cache"))
    previous = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    if previous is None:
        os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    else:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = previous
