"""Fixtures: small tokenized datasets in the ``marin.tokenized/v1`` layout, written with array_record."""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport.levanter_data import pattern_documents, tiny_config, write_tokenized
from testsupport.shared import build_once


def _write_tiny_dataset(root: str) -> str:
    return write_tokenized(root, {
        "train": pattern_documents(200, 64, seed=1),
        "validation": pattern_documents(40, 64, seed=2),
    }, vocab_size=64, eos_id=0, docs_per_shard=120)


@pytest.fixture
def tiny_dataset(tmp_path) -> str:
    """A 64-token vocabulary dataset with train and validation splits (two train shards)."""
    return _write_tiny_dataset(str(tmp_path / "tok"))


@pytest.fixture(scope="session")
def shared_tiny_dataset(tmp_path_factory) -> str:
    """:func:`tiny_dataset`'s data written once a session (read-only): for module-scoped runs that
    several tests compare against (a run is the same on either copy of the data)."""
    root = build_once(tmp_path_factory, "levanter-tiny-dataset", lambda folder: _write_tiny_dataset(str(folder / "tok")))
    return str(root / "tok")


@pytest.fixture(scope="session")
def pretrained_tiny(tmp_path_factory) -> tuple[str, str]:
    """``(data, output)``: :func:`tiny_dataset`'s data, and a run of ``tiny_config`` trained 20 steps on
    it (read-only: the LoRA, EMA and DPO tests start from it). Trained once a session, not once an
    xdist worker (``build_once``): the modules that use it run in either worker."""

    def build(root: Path) -> None:
        from levanter.trainer import main  # when built: collecting the tests needs no trainer

        data = _write_tiny_dataset(str(root / "tok"))
        main(tiny_config(data, num_train_steps=20, eval_batches=0), str(root / "pretrained"))

    root = build_once(tmp_path_factory, "levanter-pretrained-tiny", build)
    return str(root / "tok"), str(root / "pretrained")
