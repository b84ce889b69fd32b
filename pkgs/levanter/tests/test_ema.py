"""``ema=``: an average of the parameters kept beside them in every checkpoint and in ``final/``."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig, read_checkpoint_params
from levanter.ema import EmaConfig, ema_update
from levanter.generate import load_model
from levanter.initialize import CheckpointStart, TrainedModel, initial_params
from levanter.trainer import main
from testsupport.levanter_data import tiny_config


def _leaves(params) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(params)}


def test_a_branch_adds_an_average_that_follows_the_parameters_and_is_read_either_way(pretrained_tiny,
                                                                                       tmp_path) -> None:
    tiny_dataset, start = pretrained_tiny
    out = str(tmp_path / "ema")
    decay = 0.5
    # A branch of a run that kept no average (its checkpoint 20) that keeps one: the state it restores
    # holds one array tree more than the checkpoint (levanter.training.branch).
    config = tiny_config(tiny_dataset, num_train_steps=23, eval_batches=0, ema=decay,
                         checkpoint=CheckpointConfig(save_every=1, keep_last=3),
                         initialize_from=CheckpointStart(os.path.join(start, "checkpoints"), 20))
    assert config.trainer.ema == EmaConfig(decay=0.5)
    assert main(config, out).start_step == 20

    checkpoints = os.path.join(out, "checkpoints")
    steps = (21, 22, 23)
    trained = [_leaves(read_checkpoint_params(checkpoints, step)) for step in steps]
    for n in (1, 2, 3):
        # Debiased (optax's ema(debias=True)) from the branch: sum_k (1 - d) d^(n-k) p_k / (1 - d^n) over
        # the branch's steps; the branch point's weights have no weight.
        weights = [(1 - decay) * decay ** (n - k) / (1 - decay ** n) for k in range(1, n + 1)]
        saved = _leaves(read_checkpoint_params(checkpoints, steps[n - 1], ema=True))
        for key, value in saved.items():
            expected = sum(w * p[key] for w, p in zip(weights, trained[:n], strict=True))
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=f"step {n} {key}")
    final_raw, final_ema = _leaves(load_model(out)[1]), _leaves(load_model(out, ema=True)[1])
    assert final_raw.keys() == final_ema.keys()
    for key in final_raw:
        np.testing.assert_array_equal(final_ema[key], _leaves(read_checkpoint_params(checkpoints, 23, ema=True))[key])
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
    with pytest.raises(ValueError, match=r"ema debias must be a bool, got 'yes'"):
        EmaConfig(debias="yes")  # type: ignore[arg-type]


def _averaged(config: EmaConfig, start: float, trained: list[float]) -> float:
    """The average of a scalar parameter over ``trained`` (its values after each step), as the
    training step moves it: the recurrence with the decay of each update (``EmaConfig.decay_at``)."""
    ema, held = jnp.float32(start), jnp.int32(0)
    for p in trained:
        ema, held = ema_update(ema, jnp.float32(p), config.decay_at(held)), held + 1
    return float(ema)


def test_the_default_average_of_a_short_run_is_its_steps_not_its_start() -> None:
    # dpo()'s 100 steps at the default decay 0.999: the parameter goes from 0 to 1 in the first
    # step and stays there. Without debiasing the average would still be 90.5% the start (0.095).
    steps = [1.0] * 100
    assert _averaged(EmaConfig(), 0.0, steps) == pytest.approx(1.0, rel=1e-5)
    assert _averaged(EmaConfig(debias=False), 0.0, steps) == pytest.approx(1 - 0.999 ** 100, rel=1e-4)
    # A ramp 1..100: the debiased average is the closed form, about the mean (50.5) leaning late.
    ramp = [float(k) for k in range(1, 101)]
    closed = sum(0.001 * 0.999 ** (100 - k) * k for k in range(1, 101)) / (1 - 0.999 ** 100)
    assert _averaged(EmaConfig(), -1000.0, ramp) == pytest.approx(closed, rel=1e-4)
    assert 50.5 < closed < 52
