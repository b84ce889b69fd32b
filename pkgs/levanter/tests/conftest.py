"""Fixtures: small tokenized datasets in the ``marin.tokenized/v1`` layout, written with array_record."""

from __future__ import annotations

import pytest

from testsupport.levanter_data import pattern_documents, write_tokenized


@pytest.fixture
def tiny_dataset(tmp_path) -> str:
    """A 64-token vocabulary dataset with train and validation splits (two train shards)."""
    return write_tokenized(str(tmp_path / "tok"), {
        "train": pattern_documents(200, 64, seed=1),
        "validation": pattern_documents(40, 64, seed=2),
    }, vocab_size=64, eos_id=0, docs_per_shard=120)
