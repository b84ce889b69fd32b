"""AdamConfig: schedules, validation and the Optax transformation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from levanter.optim import AdamConfig, DecayShape, Schedule, learning_rate


def _lrs(cfg: AdamConfig, steps: int) -> np.ndarray:
    fn = jax.jit(cfg.lr_schedule(steps))  # one program for every step, not one per operation
    lrs = np.array([float(fn(s)) for s in range(steps)])
    np.testing.assert_allclose(cfg.learning_rates(steps), lrs, rtol=1e-6, atol=1e-6 * cfg.learning_rate)
    return lrs


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
    ({"schedule": "wsd"}, "decay must be a fraction in (0, 1) or a whole number of steps for schedule='wsd', got None"),
    ({"schedule": "wsd", "decay": 2.5}, "got 2.5"),
    ({"schedule": "wsd", "decay": 0.2, "decay_shape": "exp"}, "decay_shape must be one of"),
    ({"decay": 0.2}, "decay applies to schedule='wsd' only, got decay=0.2 with schedule='cosine'"),
    ({"schedule": "linear", "decay_shape": "cosine"}, "decay_shape applies to schedule='wsd' only"),
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
    update = jax.jit(tx.update)  # one program for both calls, not one per operation
    updates, _ = update(zero, tx.init(params), params)
    # With zero gradients only weight decay moves parameters: matrices shrink, vectors do not.
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
    np.testing.assert_allclose(updates["scale"], 0.0)
    huge = {"w": jnp.full((2, 2), 1e6), "scale": jnp.zeros((2,))}
    state = optax.clip_by_global_norm(1.0).init(params)
    clipped, _ = jax.jit(optax.clip_by_global_norm(1.0).update)(huge, state)
    assert float(optax.tree.norm(clipped)) == pytest.approx(1.0, rel=1e-5)
    update(huge, tx.init(params), params)  # the chain accepts huge gradients without overflow


# WSD over 10 steps: 2 warmup steps, stable to step 5, decay over the last 4 (t = 0, 1/4, 1/2, 3/4).
_WSD_TABLE = {
    "linear": [0.5, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25],
    "1-sqrt": [0.5, 1, 1, 1, 1, 1, 1, 0.5, 1 - 0.5 ** 0.5, 1 - 0.75 ** 0.5],
    "cosine": [0.5, 1, 1, 1, 1, 1, 1, (1 + 0.5 ** 0.5) / 2, 0.5, (1 - 0.5 ** 0.5) / 2],
}


@pytest.mark.parametrize("shape", sorted(_WSD_TABLE))
def test_wsd_matches_a_hand_computed_table(shape):
    cfg = AdamConfig(learning_rate=1.0, warmup=2, schedule="wsd", decay=4, decay_shape=shape, min_lr_ratio=0.0)
    assert cfg.decay_shape is DecayShape(shape)
    np.testing.assert_allclose(_lrs(cfg, 10), _WSD_TABLE[shape], rtol=1e-6, atol=1e-7)
    assert cfg.decay_start(10) == 6


def test_wsd_floor_and_decay_as_a_fraction():
    # 50 steps, decay = 20% = 10 steps from step 40, floor 0.1 x peak 2.0, no warmup.
    lrs = _lrs(AdamConfig(learning_rate=2.0, warmup=0, schedule="wsd", decay=0.2, min_lr_ratio=0.1), 50)
    np.testing.assert_allclose(lrs[:41], 2.0, rtol=1e-6)
    assert lrs[45] == pytest.approx(0.2 + 1.8 * 0.5, rel=1e-6)
    assert lrs[49] == pytest.approx(0.2 + 1.8 * 0.1, rel=1e-6)
    assert AdamConfig(schedule="wsd", decay=0.2).decay_start(50) == 40


def test_decay_start_of_every_schedule():
    assert AdamConfig(warmup=10, schedule="cosine").decay_start(100) == 10
    assert AdamConfig(warmup=0.05, schedule="linear").decay_start(100) == 5
    assert AdamConfig(warmup=10, schedule="constant").decay_start(100) == 100
    assert AdamConfig(warmup=10, schedule="wsd", decay=30).decay_start(100) == 70
    with pytest.raises(ValueError, match="num_train_steps must be a positive int, got 0"):
        AdamConfig().decay_start(0)


def test_wsd_that_does_not_fit_names_both_phases():
    cfg = AdamConfig(warmup=30, schedule="wsd", decay=80)
    with pytest.raises(ValueError) as err:
        cfg.lr_schedule(100)
    assert str(err.value) == ("decay (80 steps) and warmup (30 steps) of schedule='wsd' do not fit in "
                              "num_train_steps=100")
    cfg.check(110)


def test_a_longer_wsd_run_agrees_with_a_shorter_one_until_its_decay():
    short = AdamConfig(learning_rate=1e-3, warmup=10, schedule="wsd", decay=0.2)
    start = short.decay_start(100)
    assert start == 80
    assert short.same_first_steps(100, short, 200, start)
    assert not short.same_first_steps(100, short, 200, start + 1)
    # A warmup given as a fraction grows with the run, so the two differ from step 0.
    by_fraction = dataclasses.replace(short, warmup=0.1)
    assert not by_fraction.same_first_steps(100, by_fraction, 200, 1)
    # Other hyperparameters must match too, and a run has no steps past its end.
    assert not short.same_first_steps(100, dataclasses.replace(short, beta2=0.99), 200, 10)
    assert not short.same_first_steps(100, short, 200, 101)
    cosine = AdamConfig(learning_rate=1e-3, warmup=10)
    assert cosine.same_first_steps(100, short, 200, 10) and not cosine.same_first_steps(100, short, 200, 12)


def test_the_optimizer_state_holds_the_rate_just_applied():
    cfg = AdamConfig(learning_rate=1.0, warmup=4, schedule="linear", min_lr_ratio=0.0)
    tx = cfg.build(8)
    params = {"w": jnp.ones((2, 2))}
    state = jax.jit(tx.init)(params)
    grads = {"w": jnp.full((2, 2), 0.1)}
    update = jax.jit(tx.update)  # one program for the six steps, not one per operation
    applied = []
    for _ in range(6):
        _, state = update(grads, state, params)
        applied.append(float(learning_rate(state)))
    np.testing.assert_allclose(applied, cfg.learning_rates(8)[:6], rtol=1e-6)
    np.testing.assert_allclose(applied, [0.25, 0.5, 0.75, 1.0, 1.0, 0.75], rtol=1e-6)


@pytest.mark.parametrize("cfg, steps", [
    (AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=20, min_lr_ratio=0.1), 400),
    (AdamConfig(learning_rate=1e-2, warmup=0.1, schedule="wsd", decay=0.2, min_lr_ratio=0.1), 77),
    (AdamConfig(learning_rate=1e-2, warmup=3, schedule="wsd", decay=5, decay_shape="1-sqrt", min_lr_ratio=0.0), 30),
    (AdamConfig(learning_rate=1e-3, warmup=5, schedule="linear"), 50),
])
def test_a_rate_given_to_at_rate_updates_exactly_as_the_schedule_of_build(cfg, steps):
    """The trainer hands each step ``rate_of_step(step)`` through ``at_rate``: the states it reaches are
    bit for bit those of ``build``'s own schedule, rate, moments and parameters."""
    params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.ones(3)}
    grads = {"w": jnp.full((2, 3), 0.3), "b": jnp.full(3, -0.2)}
    rate_of_step = cfg.rate_of_step(steps)
    scheduled, given = cfg.build(steps), cfg.at_rate
    state_a = jax.jit(scheduled.init)(params)
    state_b = jax.jit(given(0.0).init)(params)
    assert jax.tree.structure(state_a) == jax.tree.structure(state_b)
    p_a = p_b = params

    # Each step, the update applied, in one program (eagerly, a program per operation).
    @jax.jit
    def step_a(s, p):
        u, s = scheduled.update(grads, s, p)
        return s, optax.apply_updates(p, u)

    @jax.jit
    def step_b(s, p, r):
        u, s = given(r).update(grads, s, p)
        return s, optax.apply_updates(p, u)

    for step in range(steps):
        state_a, p_a = step_a(state_a, p_a)
        state_b, p_b = step_b(state_b, p_b, rate_of_step(step))
        assert float(learning_rate(state_b)) == float(learning_rate(state_a)), step
    for a, b in zip(jax.tree.leaves((state_a, p_a)), jax.tree.leaves((state_b, p_b)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_compiled_step_is_one_program_for_every_schedule_peak_and_length():
    """Two runs of one model that differ in peak rate, warmup, schedule and length lower to the same
    program, so JAX's compilation cache compiles it once (a sweep, a branch and its trunk)."""
    from levanter.models.llama import LlamaConfig
    from levanter.training.state import abstract_state
    from levanter.training.step import make_train_step

    model_config = LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2,
                               num_layers=1, max_seq_len=32)
    model = model_config.build(jnp.float32)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    batch = jax.ShapeDtypeStruct((4, 33), jnp.int32)
    rate = jax.ShapeDtypeStruct((), jnp.float32)

    def program(cfg: AdamConfig, steps: int, given: bool) -> str:
        target = abstract_state(model_config, cfg.at_rate(0.0), mesh)
        tx = cfg.at_rate if given else cfg.build(steps)
        args = (target, batch, rate) if given else (target, batch)
        return jax.jit(make_train_step(model, tx, jnp.float32, 1)).lower(*args).as_text()

    a = AdamConfig(learning_rate=3e-3, weight_decay=0.1, warmup=20, min_lr_ratio=0.1)
    b = AdamConfig(learning_rate=1e-2, weight_decay=0.1, warmup=3, schedule="wsd", decay=5)
    assert program(a, 400, True) == program(b, 30, True)
    # Built with its schedule, the step holds it: the two differ (what the trainer no longer compiles).
    assert program(a, 400, False) != program(b, 30, False)
