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
