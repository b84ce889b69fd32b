"""Starting a run from another run's checkpoint: the same trajectory as training it in one go."""

from __future__ import annotations

import json
import os
import re

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from levanter.checkpoint import CheckpointConfig
from levanter.config import config_from_dict
from levanter.initialize import CheckpointStart
from levanter.optim import AdamConfig
from levanter.trainer import main
from testsupport.levanter_data import tiny_config

CONSTANT = AdamConfig(learning_rate=3e-3, warmup=2, weight_decay=0.1, schedule="constant")


def _config(data: str, steps: int, **kw):
    return tiny_config(data, num_train_steps=steps, optimizer=kw.pop("optimizer", CONSTANT), eval_batches=0,
                       checkpoint=CheckpointConfig(save_every=4, keep_last=1, keep_every=4, async_save=False), **kw)


def checkpoint_state(out: str, step: int) -> list[np.ndarray]:
    """Every array of a run's checkpoint ``step`` (params, optimizer state, step, key), in tree order."""
    with ocp.CheckpointManager(os.path.join(out, "checkpoints"), item_names=("state", "data"),
                               options=ocp.CheckpointManagerOptions(read_only=True)) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    return [np.asarray(leaf) for leaf in jax.tree.leaves(restored.state)]


def assert_same_state(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.dtype == y.dtype and np.array_equal(x, y), f"leaf {i} differs"


@pytest.fixture(scope="module")
def short(shared_tiny_dataset, tmp_path_factory) -> str:
    """A 4-step run (read-only): the checkpoint the tests start from."""
    out = str(tmp_path_factory.mktemp("short") / "run")
    main(_config(shared_tiny_dataset, 4), out)
    return out


@pytest.fixture(scope="module")
def fresh(shared_tiny_dataset, tmp_path_factory) -> str:
    """An 8-step run from scratch (read-only): the trajectory a started run is compared with."""
    out = str(tmp_path_factory.mktemp("fresh") / "run")
    main(_config(shared_tiny_dataset, 8), out)
    return out


def test_a_run_started_from_a_checkpoint_continues_the_trajectory(shared_tiny_dataset, short, fresh, tmp_path):
    long_out = str(tmp_path / "long")
    start = CheckpointStart(os.path.join(short, "checkpoints"), 4, metrics_path=os.path.join(short, "metrics.jsonl"))
    result = main(_config(shared_tiny_dataset, 8, initialize_from=start), long_out)
    assert (result.start_step, result.steps) == (4, 8)
    # The start is the trainer's initialize_from, of kind "checkpoint", and reads back from config.json.
    with open(os.path.join(long_out, "config.json")) as f:
        saved = json.load(f)
    assert saved["trainer"]["initialize_from"]["kind"] == "checkpoint"
    assert config_from_dict(saved).trainer.initialize_from == start
    # Parameters, optimizer state, step counter and key: bit for bit.
    assert_same_state(checkpoint_state(long_out, 8), checkpoint_state(fresh, 8))
    # The curve starts at step 1: the first run's rows, then this run's.
    with open(os.path.join(long_out, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f if "loss" in json.loads(line)]
    assert steps == list(range(1, 9))


def test_reset_data_loader_reads_the_data_from_the_start(shared_tiny_dataset, short, fresh, tmp_path):
    reset = str(tmp_path / "reset")
    main(_config(shared_tiny_dataset, 8, initialize_from=CheckpointStart(os.path.join(short, "checkpoints"), 4,
                                                                         reset_data_loader=True)), reset)
    ours, theirs = checkpoint_state(reset, 8), checkpoint_state(fresh, 8)
    # Same start, other batches: the parameters part (the counter and key do not).
    assert any(not np.array_equal(x, y) for x, y in zip(ours, theirs, strict=True))


def test_a_missing_checkpoint_is_named(shared_tiny_dataset, short, tmp_path):
    named = re.escape(os.path.join(short, "checkpoints")) + r": no committed checkpoint of step 2 \(committed: \[4\]\)"
    with pytest.raises(FileNotFoundError, match=named):
        main(_config(shared_tiny_dataset, 8, initialize_from=CheckpointStart(os.path.join(short, "checkpoints"), 2)),
             str(tmp_path / "b"))
    with pytest.raises(ValueError, match="initialize_from starts at step 8, not before the end of training"):
        _config(shared_tiny_dataset, 8, initialize_from=CheckpointStart(os.path.join(short, "checkpoints"), 8))
