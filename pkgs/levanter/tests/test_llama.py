"""LlamaConfig validation and the Haiku model's shapes, causality and parameter count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.models.llama import LlamaConfig, transformed_llama
from testsupport.levanter_data import random_params


@pytest.mark.parametrize("kwargs, message", [
    ({"hidden_dim": 30, "num_heads": 4}, "hidden_dim must be divisible by num_heads, got hidden_dim=30"),
    ({"num_heads": 4, "num_kv_heads": 3}, "num_heads must be divisible by num_kv_heads, got num_heads=4"),
    ({"num_layers": 0}, "num_layers must be a positive int, got 0"),
    ({"norm_eps": 0.0}, "norm_eps must be > 0, got 0.0"),
])
def test_validation_names_the_bad_value(kwargs, message):
    with pytest.raises(ValueError) as err:
        LlamaConfig(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("tie", [False, True])
def test_param_count_and_shapes(tie):
    cfg = LlamaConfig(vocab_size=50, hidden_dim=16, intermediate_dim=24, num_heads=4, num_kv_heads=2,
                      num_layers=2, tie_embeddings=tie)
    model = transformed_llama(cfg)
    tokens = jnp.zeros((2, 7), jnp.int32)
    # Shapes only (nothing compiled or computed): the init's and the forward pass's.
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens)
    assert sum(p.size for p in jax.tree.leaves(params)) == cfg.num_params()
    # Layer weights stacked on a leading axis (one scan over the layers): 2 layers, 2 kv heads of width 4.
    assert params["layers/attn/k_proj"]["w"].shape == (2, 16, 8)
    assert jax.eval_shape(model.apply, params, None, tokens).shape == (2, 7, 50)


def test_attention_is_causal():
    cfg = LlamaConfig(vocab_size=50, hidden_dim=16, intermediate_dim=24, num_heads=4, num_kv_heads=1)
    model = transformed_llama(cfg)
    a = jnp.array([[1, 2, 3, 4, 5, 6]])
    b = a.at[0, 4:].set(jnp.array([40, 41]))
    params = random_params(cfg, seed=1)  # drawn with numpy: no init to compile
    apply = jax.jit(model.apply)
    la, lb = apply(params, None, a), apply(params, None, b)
    np.testing.assert_allclose(la[0, :4], lb[0, :4], rtol=1e-5, atol=1e-6)
    assert not np.allclose(la[0, 4:], lb[0, 4:])


def test_rotary_scores_depend_on_relative_position_only():
    from levanter.ops.rotary import rotary

    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)

    def score(m: int, n: int) -> float:
        rq = rotary(q, jnp.array([m]), 10000.0)
        rk = rotary(k, jnp.array([n]), 10000.0)
        return float(jnp.sum(rq * rk))

    assert score(5, 2) == pytest.approx(score(13, 10), rel=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)
    assert score(3, 3) == pytest.approx(float(jnp.sum(q * k)), rel=1e-5)


def _rotary_by_halves(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotary as the papers write it: the head's halves sliced and concatenated (float32 inside)."""
    half = x.shape[-1] // 2
    angles = positions[..., None].astype(jnp.float32) / (theta ** (jnp.arange(half, dtype=jnp.float32) / half))
    angles = angles if angles.ndim == 3 else angles[None]
    cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_rotary_by_a_signed_permutation_is_the_halves_formula(dtype):
    from levanter.ops.rotary import rotary

    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(2, 7, 3, 64)) * 30, dtype)
    positions = jnp.asarray(rng.integers(0, 4096, size=(2, 7)))
    ours, theirs = rotary(x, positions, 500000.0), _rotary_by_halves(x, positions, 500000.0)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(theirs, np.float32))
    cotangent = jnp.asarray(rng.normal(size=x.shape), dtype)

    def grad(f):
        return np.asarray(jax.vjp(lambda a: f(a, positions, 500000.0), x)[1](cotangent)[0], np.float32)

    # bfloat16: the two sums' order may differ by one rounding of the result (a unit in the last
    # place is 1/64 between 2 and 4).
    np.testing.assert_allclose(grad(rotary), grad(_rotary_by_halves), rtol=1e-6 if dtype == jnp.float32 else 1e-2,
                               atol=1e-6 if dtype == jnp.float32 else 1 / 64)


def test_presets():
    import importlib.util
    import os

    # experiments/ is a top-level folder of the project, not an installed package.
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", "llama.py")
    spec = importlib.util.spec_from_file_location("_experiments_llama", path)
    presets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(presets)
    # Marin's shapes under Marin's names: (hidden, intermediate, heads, kv heads, layers, max_seq_len).
    marin_shapes = {
        "llama_nano": (32, 128, 2, 2, 2, 512),
        "llama_30m": (128, 448, 2, 2, 4, 1024),
        "llama_50m": (192, 448, 2, 2, 4, 1024),
        "llama_75m": (256, 896, 4, 4, 8, 1024),
        "llama_150m": (512, 1792, 8, 8, 6, 1024),
        "llama_300m": (768, 2688, 12, 12, 12, 1024),
        "llama_600m": (1024, 3584, 16, 8, 24, 1024),
        "llama_1_4b": (2048, 7168, 16, 8, 16, 4096),
    }
    for name, shape in marin_shapes.items():
        c = getattr(presets, name)
        assert (c.hidden_dim, c.intermediate_dim, c.num_heads, c.num_kv_heads, c.num_layers, c.max_seq_len) == shape, name
    # With the Llama 3 vocabulary the counts match the names, as Marin counts them.
    assert 140e6 <= presets.llama_150m.num_params() <= 165e6
    assert 28e6 <= presets.llama_30m.num_params() <= 40e6
    assert presets.llama_150m.flops_per_token(1024) > 6 * presets.llama_150m.num_params() * 0.2
