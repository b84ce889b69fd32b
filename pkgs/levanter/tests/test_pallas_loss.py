"""The Pallas kernels of the loss over the head (``levanter.ops.pallas_loss`` and the staged training
loss of ``levanter.ops.pallas_staged``, run in Pallas' interpreter on a CPU) equal the loss over
materialised logits: values and gradients, weights with zeros, a vocabulary that is not a multiple
of the tile, chunks of staged rows, and bfloat16 gradients within the materialised loss's rounding."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.ops.blocks import LossImpl
from levanter.ops.cross_entropy import lm_loss, resolve_loss_impl, token_logprobs
from levanter.ops.pallas_loss import Tiles, default_tiles
from testsupport.levanter_data import head_problem, random_params

B, T, D, V = 2, 13, 16, 300  # 26 rows in one padded row tile; three vocabulary tiles, the last ragged
TILES = Tiles(rows=128, vocab=128)
STAGED = {"staged": TILES, "recomputed": dataclasses.replace(TILES, staged=False)}


@pytest.fixture(scope="module")
def problem():
    hidden, head, targets, weights = head_problem(0, B, T, D, V, head_scale=0.5)
    targets = np.array(targets)
    targets[0, 0] = V - 1  # a target in the ragged tile
    return hidden, head, jnp.asarray(targets), jnp.asarray(np.asarray(weights) * 1.5)


def _materialised(hidden, head, targets, weights, z_weight):
    logits = jnp.einsum("btd,dv->btv", hidden, head, preferred_element_type=jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    count = jnp.maximum(jnp.sum(weights), 1.0)
    ce, z = jnp.sum((lse - picked) * weights) / count, jnp.sum(lse * lse * weights) / count
    return ce + z_weight * z, ce, z


def _pallas(hidden, head, targets, weights, z_weight, tiles=TILES):
    return lm_loss(hidden, head, targets, weights, z_weight=z_weight, impl="pallas", tiles=tiles, interpret=True)


def _values_and_grads(fn):
    @jax.jit
    def run(h, w):
        # The trainer's gradient (of the total) and one of another combination of the outputs.
        total = jax.grad(lambda a, b: fn(a, b)[0], argnums=(0, 1))(h, w)
        mixed = jax.grad(lambda a, b: (lambda o: 3.0 * o[1] - o[2])(fn(a, b)), argnums=(0, 1))(h, w)
        return fn(h, w), total, mixed

    return run


@pytest.mark.parametrize("kind", sorted(STAGED))
def test_kernels_equal_the_materialised_loss(problem, kind):
    hidden, head, targets, weights = problem
    assert float(weights.min()) == 0.0
    got = _values_and_grads(lambda h, w: _pallas(h, w, targets, weights, 1e-2, STAGED[kind]))(hidden, head)
    want = _values_and_grads(lambda h, w: _materialised(h, w, targets, weights, 1e-2))(hidden, head)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


def test_kernel_logprobs_and_their_gradient(problem):
    hidden, head, targets, weights = problem

    def both(fn):
        return jax.jit(lambda h, w: (fn(h, w), jax.grad(lambda a, b: jnp.sum(fn(a, b) * weights), argnums=(0, 1))(h, w)))

    got = both(lambda h, w: token_logprobs(h, w, targets, impl="pallas", tiles=TILES, interpret=True))(hidden, head)
    want = both(lambda h, w: jnp.take_along_axis(jax.nn.log_softmax(h @ w), targets[..., None], axis=-1)[..., 0])(
        hidden, head)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", sorted(STAGED))
def test_kernels_bfloat16_gradient_within_the_materialised_rounding(problem, kind):
    hidden, head, targets, weights = problem
    exact = jax.jit(jax.grad(lambda h, w: _materialised(h, w, targets, weights, 1e-2)[0], argnums=(0, 1)))(hidden, head)
    low = (hidden.astype(jnp.bfloat16), head.astype(jnp.bfloat16))

    def errors(fn):
        grads = jax.jit(jax.grad(lambda h, w: fn(h, w, targets, weights, 1e-2)[0], argnums=(0, 1)))(*low)
        assert all(g.dtype == jnp.bfloat16 for g in grads)
        # The norms in numpy: no program per operation.
        return [float(np.linalg.norm(np.asarray(g, np.float32) - e) / np.linalg.norm(e))
                for g, e in zip(grads, map(np.asarray, exact), strict=True)]

    ours = errors(lambda *args: _pallas(*args, tiles=STAGED[kind]))
    theirs = errors(_materialised)
    assert ours[0] <= 1.1 * theirs[0] and ours[1] <= 1.1 * theirs[1], (ours, theirs)


def test_auto_is_the_blockwise_scan_off_a_tpu_and_bad_names_are_refused():
    assert resolve_loss_impl("auto") is LossImpl.BLOCKWISE  # the suite runs on CPUs
    assert resolve_loss_impl(None) is LossImpl.BLOCKWISE and resolve_loss_impl("pallas") is LossImpl.PALLAS
    with pytest.raises(ValueError, match=r"loss_impl must be one of \['auto', 'blockwise', 'pallas'\], got 'fused'"):
        resolve_loss_impl("fused")
    with pytest.raises(ValueError, match="Tiles.vocab must be a positive multiple of 128, got 100"):
        Tiles(rows=128, vocab=100)


def test_tiles_asked_for_by_no_size_are_the_default_tiles():
    # One set of measured defaults: Tiles() is what the loss takes when given none (rows enough).
    assert default_tiles(64 * 1024) == Tiles() == default_tiles(64 * 1024, 1024)
    assert Tiles().staged  # the training loss's gradients in its forward
    assert default_tiles(200) == dataclasses.replace(Tiles(), rows=256)  # few rows: a smaller row tile
    assert default_tiles(64 * 1024, 2048) == dataclasses.replace(Tiles(), rows=Tiles().rows // 2)  # wide: fewer


def test_auto_gives_the_kernels_the_widths_they_won_on_one_tpu(monkeypatch: pytest.MonkeyPatch):
    import jax

    from levanter.ops.cross_entropy import PALLAS_WIDEST

    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    assert resolve_loss_impl("auto", 512) is LossImpl.PALLAS and resolve_loss_impl("auto") is LossImpl.PALLAS
    assert resolve_loss_impl("auto", PALLAS_WIDEST) is LossImpl.PALLAS and PALLAS_WIDEST == 2048
    assert resolve_loss_impl("auto", 4096) is LossImpl.BLOCKWISE  # wider than any measured
    assert resolve_loss_impl("pallas", 4096) is LossImpl.PALLAS  # asked for by name
    monkeypatch.setattr(jax, "device_count", lambda: 4)
    assert resolve_loss_impl("auto", 512) is LossImpl.BLOCKWISE  # a custom call runs whole on one device


def test_the_model_built_with_the_kernels_trains_on_them():
    from levanter.models.impl import Impl
    from levanter.models.llama import LlamaConfig
    from levanter.training.loss import loss_fn, sequence_logprobs

    config = LlamaConfig(vocab_size=200, hidden_dim=16, intermediate_dim=32, num_heads=4, num_kv_heads=2, num_layers=1)
    kernels = config.build(impl=Impl(loss="pallas", interpret=True))
    scan = config.build(impl=Impl(loss="blockwise"))
    params = jax.tree.map(jnp.asarray, random_params(config))  # numpy's draw: Haiku's init compiles for seconds
    batch = jnp.asarray(np.random.default_rng(0).integers(0, 200, size=(2, 9)), jnp.int32)

    def run(model):
        def fn(p):
            return loss_fn(model, p, batch, jnp.float32, 1e-3), sequence_logprobs(model, p, batch)
        return fn

    def both(model):
        """Whether the program holds the kernels, and its results: the loss, its gradient and the
        log-probabilities, one program traced once."""
        traced = jax.jit(lambda p: (jax.value_and_grad(lambda q: run(model)(q)[0])(p), run(model)(p)[1])).trace(params)
        return "pallas_call" in str(traced.jaxpr), traced.lower().compile()(params)

    (kernels_in_program, got), (kernels_in_scan, want) = both(kernels), both(scan)
    # The model's Impl.loss reaches the loss: its program holds the kernels, the other's none.
    assert kernels_in_program and not kernels_in_scan
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


def test_one_pass_backward_equals_the_two_pass_one():
    # Four row tiles (the one-pass kernel needs three or more) and three vocabulary tiles.
    hidden, head, targets, weights = head_problem(1, batch=2, seq=200, hidden=8, vocab=V, head_scale=0.5)

    def grads(one_pass):
        tiles = Tiles(rows=128, vocab=128, one_pass=one_pass, staged=False)
        return jax.jit(jax.grad(lambda h, w: lm_loss(h, w, targets, weights, z_weight=1e-2, impl="pallas",
                                                     tiles=tiles, interpret=True)[0], argnums=(0, 1)))(hidden, head)

    want = jax.jit(jax.grad(lambda h, w: _materialised(h, w, targets, weights, 1e-2)[0], argnums=(0, 1)))(hidden, head)
    for x, y in zip(grads(True), want, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("chunk", [256, 512])
def test_staged_chunks_of_rows_equal_the_materialised_loss(monkeypatch: pytest.MonkeyPatch, chunk):
    """660 rows in six row tiles of 128, staged 256 rows at a time (a first chunk, then two in a loop)
    or 512 (a first chunk and a smaller last one); d head summed over the chunks."""
    from levanter.ops import blocks
    from levanter.ops.pallas_staged import chunk_rows

    hidden, head, targets, weights = head_problem(2, batch=2, seq=330, hidden=8, vocab=V, head_scale=0.5)
    monkeypatch.setattr(blocks, "STAGE_LOGITS", chunk * 384)  # the vocabulary's three tiles: 384 columns
    assert chunk_rows(660, V, TILES) == chunk
    got = _values_and_grads(lambda h, w: _pallas(h, w, targets, weights, 1e-2))(hidden, head)
    want = _values_and_grads(lambda h, w: _materialised(h, w, targets, weights, 1e-2))(hidden, head)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", sorted(STAGED))
def test_a_profile_charges_every_matmul_of_the_kernels_to_the_loss(problem, kind):
    """Each dot of the trainer's gradient through the kernels, forward and backward, carries the
    loss's name scope in its location (what ``benchmarks/device_profile`` reads from a trace)."""
    import re

    from levanter.ops.blocks import SCOPE

    hidden, head, targets, weights = problem
    step = jax.jit(jax.value_and_grad(lambda h, w: _pallas(h, w, targets, weights, 1e-2, STAGED[kind])[0],
                                      argnums=(0, 1)))
    text = step.lower(hidden, head).as_text(debug_info=True)
    where = dict(re.findall(r"^(#loc\d+) = (loc\(.*\))$", text, re.M))
    dots = [where[loc] for loc in re.findall(r"stablehlo\.dot_general.*loc\((#loc\d+)\)", text)]
    assert len(dots) >= 4 and all(SCOPE in loc for loc in dots), dots


def test_the_training_path_does_not_import_pallas_tpu_until_a_kernel_is_built():
    """Every training and evaluation process imports the loss's dispatch; Pallas' TPU module (0.15
    CPU s a process) comes only with a kernel, which a CPU run never builds."""
    code = ("import sys, levanter.trainer, levanter.eval\n"
            "print('jax.experimental.pallas.tpu' in sys.modules)\n"
            "from levanter.ops.pallas_loss import _params\n"
            "_params()\n"
            "print('jax.experimental.pallas.tpu' in sys.modules)\n")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["False", "True"], ran.stdout
