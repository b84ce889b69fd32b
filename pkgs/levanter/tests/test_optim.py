"""AdamConfig: schedules, validation and the Optax transformation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from levanter.optim import AdamConfig, Schedule


def _lrs(cfg: AdamConfig, steps: int) -> np.ndarray:
    fn = cfg.lr_schedule(steps)
    return np.array([float(fn(s)) for s in range(steps)])


def test_warmup_then_cosine_to_floor():
    lrs = _lrs(AdamConfig(learning_rate=1.0, warmup=10, schedule="cosine", min_lr_ratio=0.1), 110)
    np.testing.assert_allclose(lrs[:10], np.arange(1, 11) / 10, rtol=1e-6)
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55, rel=1e-5)  # half way down the cosine: (1 + 0.1) / 2
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)
    assert np.all(np.diff(lrs[10:]) <= 1e-7)


def test_linear_and_constant_and_warmup_fraction():
    lin = _lrs(AdamConfig(learning_rate=2.0, warmup=0.1, schedule=Schedule.LINEAR, min_lr_ratio=0.0), 100)
    assert lin[9] == pytest.approx(2.0) and lin[55] == pytest.approx(1.0)
    const = _lrs(AdamConfig(learning_rate=2.0, warmup=0, schedule="constant"), 50)
    np.testing.assert_allclose(const, 2.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"learning_rate": 0}, "learning_rate must be > 0, got 0"),
    ({"beta2": 1.0}, "beta2 must be in [0, 1), got 1.0"),
    ({"warmup": 2.5}, "got 2.5"),
    ({"schedule": "step"}, "got 'step'"),
    ({"min_lr_ratio": 2}, "min_lr_ratio must be in [0, 1], got 2"),
    ({"max_grad_norm": -1.0}, "got -1.0"),
])
def test_validation_names_the_bad_value(kwargs, message):
    with pytest.raises(ValueError) as err:
        AdamConfig(**kwargs)
    assert message in str(err.value)


def test_build_clips_and_decays_matrices_only():
    tx = AdamConfig(learning_rate=0.1, warmup=0, schedule="constant", weight_decay=0.5,
                    max_grad_norm=1.0).build(10)
    params = {"w": jnp.ones((2, 2)), "scale": jnp.ones((2,))}
    zero = {"w": jnp.zeros((2, 2)), "scale": jnp.zeros((2,))}
    updates, _ = tx.update(zero, tx.init(params), params)
    # With zero gradients only weight decay moves parameters: matrices shrink, vectors do not.
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
    np.testing.assert_allclose(updates["scale"], 0.0)
    huge = {"w": jnp.full((2, 2), 1e6), "scale": jnp.zeros((2,))}
    state = optax.clip_by_global_norm(1.0).init(params)
    clipped, _ = optax.clip_by_global_norm(1.0).update(huge, state)
    assert float(optax.tree.norm(clipped)) == pytest.approx(1.0, rel=1e-5)
    tx.update(huge, tx.init(params), params)  # the chain accepts huge gradients without overflow
