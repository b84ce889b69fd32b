"""Optimizer state that fits: bfloat16 moments, a factored second moment, host-offloaded state."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from levanter.models.layout import stack_layers
from levanter.models.llama import LlamaConfig
from levanter.optim import COMPACT_MOMENTS, AdamConfig
from levanter.optim.moments import FactoredMoment, scale_by_compact_adam
from rigging.fields import in_hash


def _grads(seed: int):
    # numpy's draw: JAX's samplers, eager, compile a program per operation and shape
    rng = np.random.default_rng(seed)
    return {"layers/mlp/up_proj": {"w": rng.standard_normal((3, 6, 5), np.float32)},
            "embed": {"embeddings": rng.standard_normal((7, 6), np.float32)},
            "final_norm": {"scale": rng.standard_normal((6,), np.float32)}}


def _run(tx, steps: int = 3):
    params = jax.tree.map(np.zeros_like, _grads(0))
    state = jax.jit(tx.init)(params)  # one program, not one per leaf
    update = jax.jit(tx.update)
    out = []
    for i in range(steps):
        u, state = update(_grads(i), state, params)
        out.append(u)
    return out, state


def test_float32_unfactored_is_optax_adam():
    ours, _ = _run(scale_by_compact_adam(0.9, 0.95, 1e-8))
    theirs, _ = _run(optax.scale_by_adam(0.9, 0.95, 1e-8))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_bfloat16_moments_are_stored_in_bfloat16_and_stay_close():
    ours, state = _run(scale_by_compact_adam(0.9, 0.95, 1e-8, jnp.bfloat16))
    theirs, _ = _run(optax.scale_by_adam(0.9, 0.95, 1e-8))
    assert {x.dtype for x in jax.tree.leaves((state.mu, state.nu))} == {jnp.dtype(jnp.bfloat16)}
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=3e-2, atol=1e-2)


def test_factored_second_moment_is_row_and_column_means_and_exact_for_rank_one_squares():
    tx = scale_by_compact_adam(0.9, 0.95, 1e-8, factored=True)
    params = jax.tree.map(np.zeros_like, _grads(0))
    state = jax.eval_shape(tx.init, params)  # the shapes of the state: no program
    up, embed = state.nu["layers/mlp/up_proj"]["w"], state.nu["embed"]["embeddings"]
    # A stacked layer weight factors per layer (its last two axes); a vector keeps its full moment.
    assert isinstance(up, FactoredMoment) and (up.row.shape, up.col.shape) == ((3, 6), (3, 5))
    assert isinstance(embed, FactoredMoment) and (embed.row.shape, embed.col.shape) == ((7,), (6,))
    assert state.nu["final_norm"]["scale"].shape == (6,)
    # When g^2 is an outer product (|g| = a b^T), the row/column factoring loses nothing: the first
    # update equals Adam's.
    a, b = np.arange(1.0, 8.0, dtype=np.float32), np.linspace(0.5, 2.0, 6, dtype=np.float32)
    grads = {"embed": {"embeddings": np.outer(a, b) * np.where(np.arange(42).reshape(7, 6) % 3 == 0, -1.0, 1.0)}}
    p = jax.tree.map(np.zeros_like, grads)
    # Jitted: one program each, not one per operation (eager JAX compiles every operation on its own).
    ours, _ = jax.jit(lambda g, q: tx.update(g, tx.init(q), q))(grads, p)
    adam = optax.scale_by_adam(0.9, 0.95, 1e-8)
    theirs, _ = jax.jit(lambda g, q: adam.update(g, adam.init(q), q))(grads, p)
    np.testing.assert_allclose(ours["embed"]["embeddings"], theirs["embed"]["embeddings"], rtol=1e-5)


def test_moment_dtype_is_checked():
    with pytest.raises(ValueError, match="moment_dtype must be one of \\['float32', 'bfloat16'\\], got 'float16'"):
        AdamConfig(moment_dtype="float16")
    with pytest.raises(ValueError, match="factored_second_moment must be a bool, got 'yes'"):
        AdamConfig(factored_second_moment="yes")


SMALL = LlamaConfig(vocab_size=32, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=1, num_layers=2)
OPTIMIZER = AdamConfig(weight_decay=0.1)


@pytest.fixture(scope="module")
def small_step():
    """``(model, state, batch, float32 step's (state, metrics))`` of a small Llama: the step both the
    offloaded and the bfloat16-gradient steps are compared with, compiled once for the two tests."""
    from levanter.training import make_train_step, state_initializer

    state = jax.jit(state_initializer(SMALL, OPTIMIZER.at_rate(0.0)))(jax.random.PRNGKey(0))
    batch = jnp.asarray(np.random.default_rng(1).integers(0, 32, size=(2, 9)), jnp.int32)
    model = SMALL.build(jnp.float32)
    plain = jax.jit(make_train_step(model, OPTIMIZER.at_rate, jnp.float32, 1))(state, batch, jnp.float32(1e-2))
    return model, state, batch, plain


def test_offloaded_optimizer_state_lives_on_the_host_and_gives_the_same_step(small_step):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from levanter.sharding import MeshConfig, make_mesh
    from levanter.training import make_train_step

    model, state, batch, plain = small_step
    mesh = make_mesh(MeshConfig())
    rate = jnp.float32(1e-2)

    device = NamedSharding(mesh, P())
    host = device.with_memory_kind("pinned_host")
    on_host = state.replace(opt_state=jax.device_put(state.opt_state, host))
    shardings = jax.tree.map(lambda _: device, state).replace(opt_state=jax.tree.map(lambda _: host, state.opt_state))
    step = make_train_step(model, OPTIMIZER.at_rate, jnp.float32, 1,
                           opt_state_device=jax.tree.map(lambda _: device, state.opt_state))
    offloaded = jax.jit(step, out_shardings=(shardings, device))(on_host, batch, rate)
    assert {x.sharding.memory_kind for x in jax.tree.leaves(offloaded[0].opt_state)} == {"pinned_host"}
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(offloaded), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_compact_moments_barely_move_the_loss():
    """The benchmark's run (``benchmarks/bench_moments.py``: 400 steps of 8 x 128 tokens there), 25
    steps of 8 x 32 tokens here: a step of a quarter of the tokens runs about as fast as compiling it
    allows (16 tokens is no faster). The held-out loss falls from 6.24 (log 512) to 5.86, so an update
    that went wrong (no step: +6.5%) is far outside both bounds; measured: bfloat16 -0.0001%, factored
    -0.7% (at 128 tokens: -0.0008% and -1.5%)."""
    from benchmarks.bench_moments import train

    base = train("float32", False, steps=25, seq=32)["final_loss"]
    bf16 = train("bfloat16", False, steps=25, seq=32)["final_loss"]
    factored = train("bfloat16", True, steps=25, seq=32)["final_loss"]
    assert base < 0.95 * np.log(512)  # the run learned: the bounds below could tell a broken step
    assert abs(bf16 / base - 1) < 0.01
    assert abs(factored / base - 1) < 0.03


def test_bfloat16_gradients_take_nearly_the_float32_step(small_step):
    from levanter.config import TrainerConfig
    from levanter.training import make_train_step

    with pytest.raises(ValueError, match="grad_dtype must be 'float32' or 'bfloat16', got 'float16'"):
        TrainerConfig(grad_dtype="float16")
    # (The optimizer clips the gradient to norm 1 and decays the weights: neither moves Adam's first
    # step off the sign of the gradient, whose scale it divides out.)
    model, state, batch, (exact, m32) = small_step
    rounded, m16 = jax.jit(make_train_step(model, OPTIMIZER.at_rate, jnp.float32, 1, grad_dtype=jnp.bfloat16))(
        state, batch, jnp.float32(1e-2))
    assert float(m32["loss"]) == pytest.approx(float(m16["loss"]), rel=1e-2)
    assert float(m32["grad_norm"]) == pytest.approx(float(m16["grad_norm"]), rel=2e-2)
    assert {x.dtype for x in jax.tree.leaves(rounded.params)} == {jnp.dtype(jnp.float32)}
    # Adam's first step is about the sign of the gradient: bf16 rounding rarely flips one.
    moved = [np.mean(np.sign(np.asarray(a) - np.asarray(p)) == np.sign(np.asarray(b) - np.asarray(p)))
             for a, b, p in zip(jax.tree.leaves(exact.params), jax.tree.leaves(rounded.params),
                                jax.tree.leaves(state.params), strict=True)]
    assert min(moved) > 0.9


def test_factoring_a_stacked_model_takes_the_steps_of_its_layers_one_by_one():
    # Layer i's norm scale is a vector and its MLP weight a matrix, stacked or not: the stacked norm
    # scales [3, 6] keep a full second moment (never factored over the layer axis) and the stacked
    # weight [3, 6, 5] is factored per layer, so no layer's update depends on another's.
    def layers(seed: int):
        rng = np.random.default_rng(seed)  # numpy's draw: no program per sampler and shape
        return {**{f"layer_{i}/attn_norm": {"scale": rng.standard_normal((6,), np.float32) * (i + 1)} for i in range(3)},
                **{f"layer_{i}/mlp/up_proj": {"w": rng.standard_normal((6, 5), np.float32)} for i in range(3)}}

    tx = scale_by_compact_adam(0.9, 0.95, 1e-8, factored=True)
    update = jax.jit(tx.update)  # a program for each layout, not one per operation
    unrolled, stacked = layers(0), stack_layers(layers(0))
    state_u, state_s = jax.jit(tx.init)(unrolled), jax.jit(tx.init)(stacked)
    for seed in range(3):
        update_u, state_u = update(layers(seed), state_u, unrolled)
        update_s, state_s = update(stack_layers(layers(seed)), state_s, stacked)
        for key, value in stack_layers(update_u).items():
            np.testing.assert_allclose(update_s[key]["scale" if "norm" in key else "w"],
                                       value["scale" if "norm" in key else "w"], rtol=1e-6, err_msg=key)
    assert state_s.nu["layers/attn_norm"]["scale"].shape == (3, 6)
    assert isinstance(state_s.nu["layers/mlp/up_proj"]["w"], FactoredMoment)


def _second_moments(dtype, steps_of_one: int = 1000, steps_of_small: int = 2000):
    """The second moment (float32 view of what is stored) after each step of beta2 0.999 over 256
    entries: ``steps_of_one`` steps of gradient 1, then ``steps_of_small`` of gradient 0.01."""
    tx = scale_by_compact_adam(0.9, 0.999, 1e-8, dtype)
    params = {"w": jnp.zeros((256,))}
    grads = jnp.concatenate([jnp.ones(steps_of_one), jnp.full(steps_of_small, 0.01)])

    def body(state, g):
        _, state = tx.update({"w": jnp.full((256,), g)}, state, params)
        return state, state.nu["w"].astype(jnp.float32)

    return np.asarray(jax.jit(lambda s: jax.lax.scan(body, s, grads)[1])(tx.init(params)))


def test_bfloat16_moments_track_float32_where_rounding_to_nearest_freezes_them():
    # (1 - 0.999) * g^2 falls below half a bfloat16 ulp of the moment: rounded to nearest, the moment
    # stopped growing at 0.25 (float32: 0.632 after 1,000 steps) and never decayed (0.0856 at 3,000).
    exact, stored = _second_moments(jnp.float32), _second_moments(jnp.bfloat16)
    for step in (999, 1999, 2999):
        assert stored[step].mean() == pytest.approx(exact[step].mean(), rel=0.01), step
        # Each entry rounds on its own: they scatter about the float32 value, none stuck.
        assert np.all(np.abs(stored[step] / exact[step] - 1) < 0.5), step
    # The rounding noise comes from the step count: a run rounds the same way every time.
    np.testing.assert_array_equal(_second_moments(jnp.bfloat16, 5, 0), stored[:5])


def test_compact_moments_carry_their_revision_into_a_run_identity():
    # Stochastic rounding and per-layer factoring change the numbers of compact-moment runs: the
    # revision is filled in and hashed for them, and float32 runs (the field at its default) keep theirs.
    field = next(f for f in dataclasses.fields(AdamConfig) if f.name == "moment_scheme")
    assert AdamConfig().moment_scheme is None and not in_hash(field, AdamConfig().moment_scheme)
    for compact in (AdamConfig(moment_dtype="bfloat16"), AdamConfig(factored_second_moment=True)):
        assert compact.moment_scheme == COMPACT_MOMENTS == 2 and in_hash(field, compact.moment_scheme)
        assert dataclasses.replace(compact, moment_dtype="float32", factored_second_moment=False).moment_scheme is None
    with pytest.raises(ValueError, match="moment_scheme is filled in by AdamConfig \\(2, .*got 1"):
        AdamConfig(moment_scheme=1)
