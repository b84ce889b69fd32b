"""The splash kernel's tiles: chosen per chip and problem from the measured table, cut to the
sequence, validated, and (fused backward, uneven blocks) computing the same attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.ops import splash_tiles
from levanter.ops.attention import splash_attention, xla_attention
from levanter.ops.splash_tiles import DEFAULT_BLOCK, SplashBlocks, measured_tiles, splash_blocks


def test_blocks_are_cut_to_the_sequence_and_bad_ones_are_named():
    cut = SplashBlocks(q=1024, kv=1024, kv_compute=512, kv_dkv=2048, kv_dkv_compute=1024).for_seq(768)
    assert (cut.q, cut.kv, cut.kv_compute, cut.kv_dkv, cut.kv_dkv_compute, cut.q_dq) == (768, 768, 384, 768, 768, 384)
    with pytest.raises(ValueError, match="SplashBlocks.kv_compute must divide kv"):
        SplashBlocks(kv=512, kv_compute=384)
    with pytest.raises(ValueError, match="SplashBlocks.q_dq must be a positive multiple of 128, got 100"):
        SplashBlocks(q_dq=100)
    with pytest.raises(ValueError, match="multiple of 128, got 200"):
        SplashBlocks().for_seq(200)


def test_a_chips_measured_tiles_are_used_only_on_that_chip(monkeypatch):
    measured = SplashBlocks(q=256, kv=1024, kv_compute=256, fused=True)
    monkeypatch.setitem(splash_tiles._MEASURED, "TPU v5 lite", {(64, 1024): measured})
    assert splash_blocks(64, 1024, "TPU v5 lite") == measured
    assert measured_tiles("TPU v5 lite") == {(64, 1024): measured}
    # Another problem, another chip: the default, cut to the sequence.
    assert splash_blocks(128, 1024, "TPU v5 lite") == SplashBlocks.square(DEFAULT_BLOCK)
    assert splash_blocks(64, 1024, "TPU v4") == SplashBlocks.square(DEFAULT_BLOCK)
    assert splash_blocks(64, 256, "cpu") == SplashBlocks.square(256)


def _grids(fn, *args) -> list[tuple[int, ...]]:
    """The grids of the Pallas kernels ``fn`` traces to (in the order traced)."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                found.append(tuple(eqn.params["grid_mapping"].grid))
            for param in eqn.params.values():
                inner = getattr(param, "jaxpr", param)
                if hasattr(inner, "eqns"):
                    walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def test_the_attention_op_runs_the_kernel_over_the_chips_measured_blocks(monkeypatch):
    """The table decides the kernel's grid: heads x query blocks x key blocks."""
    b, t, kv, group, hd = 1, 256, 1, 2, 32
    q = jnp.ones((b, t, kv, group, hd), jnp.bfloat16)
    k = v = jnp.ones((b, t, kv, hd), jnp.bfloat16)

    def grids():  # a new function each time: JAX keeps the traces of a function it has seen
        return _grids(lambda q_, k_, v_: splash_attention(q_, k_, v_, interpret=True), q, k, v)

    assert grids() == [(2, 1, 1)]  # the default, 512, cut to 256
    chip = jax.devices()[0].device_kind
    monkeypatch.setitem(splash_tiles._MEASURED, chip, {(hd, t): SplashBlocks(q=128, kv=128, kv_compute=128)})
    assert grids() == [(2, 2, 2)]


def test_a_fused_backward_over_uneven_blocks_and_seq_minor_keys_gives_xla_attentions_gradients():
    b, t, kv, group, hd = 1, 256, 1, 1, 32
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    q = jax.random.normal(keys[0], (b, t, kv, group, hd), jnp.bfloat16)
    k = jax.random.normal(keys[1], (b, t, kv, hd), jnp.bfloat16)
    v = jax.random.normal(keys[2], (b, t, kv, hd), jnp.bfloat16)
    cotangent = jax.random.normal(keys[3], (b, t, kv * group * hd), jnp.float32)
    blocks = SplashBlocks(q=128, kv=256, kv_compute=128, q_dkv=256, kv_dkv=128, kv_dkv_compute=128, fused=True,
                          kv_seq_minor=True)

    def run(attend):
        objective = lambda q_, k_, v_: jnp.sum(attend(q_, k_, v_).astype(jnp.float32) * cotangent)  # noqa: E731
        return jax.jit(jax.value_and_grad(objective, argnums=(0, 1, 2)))(q, k, v)

    want, want_grads = run(xla_attention)
    got, got_grads = run(lambda *a: splash_attention(*a, blocks=blocks, interpret=True))
    assert float(got) == pytest.approx(float(want), rel=2e-2)
    for exp, out in zip(want_grads, got_grads, strict=True):
        exp, out = np.asarray(exp, np.float32), np.asarray(out, np.float32)
        assert np.abs(exp - out).max() / np.abs(exp).max() < 3e-2
