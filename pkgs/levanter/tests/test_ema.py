"""``ema=``: an average of the parameters kept beside them in every checkpoint and in ``final/``."""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig, read_checkpoint_params
from levanter.ema import EmaConfig
from levanter.generate import load_model
from levanter.initialize import TrainedModel, initial_params
from levanter.trainer import main
from testsupport.levanter_data import tiny_config


def _leaves(params) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(params)}


def test_the_average_follows_the_parameters_step_by_step_and_is_read_either_way(pretrained_tiny, tmp_path) -> None:
    tiny_dataset, start = pretrained_tiny
    out = str(tmp_path / "ema")
    decay = 0.5
    config = tiny_config(tiny_dataset, num_train_steps=3, eval_batches=0, ema=decay,
                         checkpoint=CheckpointConfig(save_every=1, keep_last=3), initialize_from=TrainedModel(start))
    assert config.trainer.ema == EmaConfig(decay=0.5)
    main(config, out)

    checkpoints = os.path.join(out, "checkpoints")
    average = _leaves(load_model(start)[1])  # the average starts at the starting parameters
    for step in (1, 2, 3):
        params = _leaves(read_checkpoint_params(checkpoints, step))
        average = {k: decay * average[k] + (1 - decay) * params[k] for k in params}
        saved = _leaves(read_checkpoint_params(checkpoints, step, ema=True))
        for key, value in saved.items():
            np.testing.assert_allclose(value, average[key], rtol=1e-6, atol=1e-7, err_msg=f"step {step} {key}")
    final_raw, final_ema = _leaves(load_model(out)[1]), _leaves(load_model(out, ema=True)[1])
    assert final_raw.keys() == final_ema.keys()
    for key in final_raw:
        np.testing.assert_array_equal(final_ema[key], _leaves(read_checkpoint_params(checkpoints, 3, ema=True))[key])
    assert any(not np.array_equal(final_raw[k], final_ema[k]) for k in final_raw)

    # A fine-tune may start from the average.
    started = _leaves(initial_params(TrainedModel(out, ema=True), dataclasses.replace(config.model, vocab_size=64)))
    assert all(np.array_equal(started[k], final_ema[k]) for k in final_ema)

    with pytest.raises(FileNotFoundError, match=r"kept no average of its parameters \(train it with ema=\.\.\.\)"):
        load_model(start, ema=True)
    with pytest.raises(FileNotFoundError, match="holds no average of the parameters"):
        read_checkpoint_params(os.path.join(start, "checkpoints"), 20, ema=True)
    with pytest.raises(ValueError, match=r"ema decay must be a number in \(0, 1\), got 1.5"):
        tiny_config(tiny_dataset, ema=1.5)
