"""A branch's state made from another run's checkpoint that holds more, less or differently stored arrays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.checkpoint import CheckpointConfig, Checkpointer
from levanter.optim import AdamConfig
from levanter.training.branch import restore_branch
from levanter.training.state import TrainState, state_of_params

STEP = 2


def _params(hidden: int = 8) -> dict:
    """A model's parameters in small: two matrices and a norm scale (a vector)."""
    return {"embed": {"embeddings": jnp.linspace(-1.0, 1.0, 16 * hidden).reshape(16, hidden)},
            "final_norm": {"scale": jnp.ones((hidden,))},
            "lm_head": {"w": jnp.linspace(0.5, -0.5, hidden * 16).reshape(hidden, 16)}}


def _tx(**kw):
    return AdamConfig(learning_rate=1e-2, warmup=0, **kw).build(10)


def _saved(directory: str, ema: bool = False, **kw) -> TrainState:
    """A state two optimizer updates in (moments not zero), saved as checkpoint ``STEP``."""
    tx = _tx(**kw)

    @jax.jit
    def trained(key: jax.Array) -> TrainState:
        state = state_of_params(tx, ema)(_params(), key)
        for i in range(STEP):
            grads = jax.tree.map(lambda p, i=i: jnp.cos(p * (i + 2.0)), state.params)
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            state = state.replace(params=jax.tree.map(jnp.add, state.params, updates), opt_state=opt_state,
                                  step=state.step + 1)
        return state

    state = trained(jax.random.PRNGKey(0))
    checkpointer = Checkpointer(directory, CheckpointConfig(async_save=False))
    try:
        checkpointer.save(STEP, state, {"position": 7})
    finally:
        checkpointer.close()
    return state


def _target(ema: bool = False, hidden: int = 8, **kw) -> TrainState:
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shapes = jax.eval_shape(state_of_params(_tx(**kw), ema), _params(hidden), jax.random.PRNGKey(0))
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device), shapes)


def _adam(opt_state):
    """The Adam moments' state (``count``, ``mu``, ``nu``) of either chain."""
    return next(s for s in jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu"))


def _check_structure(state: TrainState, target: TrainState) -> None:
    assert jax.tree.structure(state) == jax.tree.structure(target)
    for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(target), strict=True):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_a_branch_adds_an_average_and_stores_its_moments_in_bfloat16(tmp_path) -> None:
    saved = _saved(str(tmp_path))
    target = _target(ema=True, moment_dtype="bfloat16")
    restored = restore_branch(str(tmp_path), STEP, target)
    state = restored.state
    _check_structure(state, target)
    assert restored.step == STEP and restored.data_state == {"position": 7} and int(state.step) == STEP
    # The average starts at the branch point's weights, holding no update yet.
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.ema), jax.tree.leaves(saved.params),
                                                     strict=True))
    assert int(state.ema_steps) == 0
    before, after = _adam(saved.opt_state), _adam(state.opt_state)
    assert int(after.count) == int(before.count) == STEP
    for name in ("mu", "nu"):
        for a, b in zip(jax.tree.leaves(getattr(after, name)), jax.tree.leaves(getattr(before, name)), strict=True):
            assert a.dtype == jnp.bfloat16 and np.array_equal(np.asarray(a), np.asarray(b.astype(jnp.bfloat16)))


def test_a_branch_drops_the_average_and_factors_its_second_moment(tmp_path) -> None:
    saved = _saved(str(tmp_path), ema=True)
    target = _target(factored_second_moment=True)
    state = restore_branch(str(tmp_path), STEP, target).state
    _check_structure(state, target)
    assert state.ema is None and state.ema_steps is None
    full, factored = _adam(saved.opt_state).nu, _adam(state.opt_state).nu
    row = factored["lm_head"]["w"].row
    np.testing.assert_allclose(row, np.mean(full["lm_head"]["w"], axis=-1), rtol=1e-6)
    np.testing.assert_allclose(factored["lm_head"]["w"].col, np.mean(full["lm_head"]["w"], axis=-2), rtol=1e-6)
    np.testing.assert_array_equal(factored["final_norm"]["scale"], full["final_norm"]["scale"])  # a vector stays full


def test_a_branch_stops_factoring_with_what_factoring_would_have_used(tmp_path) -> None:
    saved = _saved(str(tmp_path), factored_second_moment=True)
    target = _target()
    state = restore_branch(str(tmp_path), STEP, target).state
    _check_structure(state, target)
    moment = _adam(saved.opt_state).nu["lm_head"]["w"]
    row, col = np.asarray(moment.row), np.asarray(moment.col)
    np.testing.assert_allclose(_adam(state.opt_state).nu["lm_head"]["w"], np.outer(row, col) / row.mean(), rtol=1e-5)
    np.testing.assert_array_equal(_adam(state.opt_state).mu["lm_head"]["w"], _adam(saved.opt_state).mu["lm_head"]["w"])


def test_a_state_the_checkpoint_cannot_make_is_a_one_line_error(tmp_path) -> None:
    _saved(str(tmp_path))
    with pytest.raises(ValueError, match=r"^cannot start from .*/2: the new state's params/embed/embeddings "
                                         r"\(16, 12\) cannot be made from what the checkpoint holds "
                                         r"\(shape \(16, 8\)\); start from step 0 or keep the source's settings$"):
        restore_branch(str(tmp_path), STEP, _target(hidden=12))


def test_an_average_written_before_it_was_counted_continues_counted_from_step_0(tmp_path) -> None:
    saved = _saved(str(tmp_path / "counted"), ema=True)
    older = {name: getattr(saved, name) for name in ("ema", "key", "opt_state", "params", "step")}  # no ema_steps
    checkpointer = Checkpointer(str(tmp_path / "older"), CheckpointConfig(async_save=False))
    try:
        checkpointer.save(STEP, older, {"position": 7})
    finally:
        checkpointer.close()
    state = restore_branch(str(tmp_path / "older"), STEP, _target(ema=True)).state
    assert int(state.ema_steps) == STEP
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.ema), jax.tree.leaves(saved.ema), strict=True))
