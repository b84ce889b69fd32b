"""Fixtures: small tokenized datasets in the ``marin.tokenized/v1`` layout, written with array_record."""

from __future__ import annotations

import os
import sys

import pytest

# Tests run with --import-mode=importlib, so the shared helper module beside them (also imported
# by the trainer subprocesses) is put on the path explicitly; its name is package-specific.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


from levanter_testlib import pattern_documents, write_tokenized  # noqa: E402


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
