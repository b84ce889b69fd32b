"""The blockwise output softmax equals the one over materialised logits: values and gradients, in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.ops.cross_entropy import default_block, lm_loss, token_logprobs, token_scores
from testsupport.levanter_data import head_problem, random_params

B, T, D, V = 3, 13, 8, 37


@pytest.fixture(scope="module")
def problem():
    cotangent = jnp.asarray(np.random.default_rng(1).standard_normal((B, T)), jnp.float32)
    return (*head_problem(0, B, T, D, V, head_scale=0.5), cotangent)


def _reference(hidden, head, targets, weights, z_weight):
    """Today's loss: every logit materialised."""
    logits = hidden @ head
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    count = jnp.maximum(jnp.sum(weights), 1.0)
    ce = jnp.sum((lse - picked) * weights) / count
    z = jnp.sum(lse * lse * weights) / count
    return ce + z_weight * z, ce, z


def _close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def _views(fn):
    """(values, the trainer's gradient, a mixed gradient) of ``fn(hidden, head) -> (total, ce, z)``, jitted."""
    @jax.jit
    def run(h, w):
        # The trainer differentiates the total with ce as aux (the gradient made in the forward scan) ...
        trainer = jax.grad(lambda a, b: (lambda o: (o[0], o[1]))(fn(a, b)), argnums=(0, 1), has_aux=True)(h, w)[0]
        # ... and any other combination of the outputs is differentiated exactly too (the second scan).
        mixed = jax.grad(lambda a, b: (lambda o: 3.0 * o[1] - o[2] + 0.5 * o[0])(fn(a, b)), argnums=(0, 1))(h, w)
        return fn(h, w), trainer, mixed

    return run


@pytest.mark.parametrize("block, z_weight", [(1, 0.0), (4, 1e-2), (5, 0.0), (None, 1e-2)])
def test_loss_and_gradients_equal_materialised_logits(problem, block, z_weight):
    hidden, head, targets, weights, _ = problem
    got = _views(lambda h, w: lm_loss(h, w, targets, weights, z_weight=z_weight, block=block))(hidden, head)
    want = _views(lambda h, w: _reference(h, w, targets, weights, z_weight))(hidden, head)
    _close(got, want)


def test_unweighted_loss_counts_every_target(problem):
    hidden, head, targets, _, _ = problem
    ones = jnp.ones((B, T))
    _close(jax.jit(lambda h: lm_loss(h, head, targets, block=4))(hidden),
           jax.jit(lambda h: _reference(h, head, targets, ones, 0.0))(hidden))


def test_trainer_gradient_takes_one_pass(problem):
    hidden, head, targets, weights, _ = problem
    # One scan (the forward's, gradient included) when only the total is differentiated; two otherwise.
    aux = jax.make_jaxpr(jax.grad(lambda h: (lambda o: (o[0], o[1]))(lm_loss(h, head, targets, weights, block=4)),
                                  has_aux=True))(hidden)
    alone = jax.make_jaxpr(jax.grad(lambda h: lm_loss(h, head, targets, weights, block=4)[1]))(hidden)
    assert str(aux).count("scan[") == 1 and str(alone).count("scan[") == 2


@pytest.mark.parametrize("block", [1, 4, None])
def test_token_logprobs_and_their_gradient(problem, block):
    hidden, head, targets, _, cotangent = problem

    def reference(h, w):
        return jnp.take_along_axis(jax.nn.log_softmax(h @ w), targets[..., None], axis=-1)[..., 0]

    def both(fn):
        return jax.jit(lambda h, w: (fn(h, w), jax.grad(lambda a, b: jnp.sum(fn(a, b) * cotangent), argnums=(0, 1))(h, w)))

    _close(both(lambda h, w: token_logprobs(h, w, targets, block=block))(hidden, head), both(reference)(hidden, head),
           atol=1e-5)


def test_scores_and_argmax_hits(problem):
    hidden, head, targets, _, _ = problem

    @jax.jit  # the reference, as one program
    def reference(h, w, targets):
        logits = h @ w
        argmax = jnp.argmax(logits, axis=-1)
        targets = targets.at[:, ::2].set(argmax[:, ::2])  # some targets are the argmax
        return targets, argmax, jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]

    targets, argmax, want = reference(hidden, head, targets)
    logp, hit = jax.jit(lambda h, w: token_scores(h, w, targets, block=4))(hidden, head)
    _close(logp, want)
    np.testing.assert_array_equal(hit, argmax == targets)
    assert bool(hit[:, ::2].all())


def test_default_block_and_bad_arguments(problem):
    hidden, head, targets, _, _ = problem
    # About 128 Mi logits per block over the batch: 8 rows x 128 positions of the Llama 3 vocabulary.
    assert default_block(8, 4096, 128_256) == 128 and default_block(32, 1024, 128_256) == 32
    assert default_block(1, 5, 64) == 5
    with pytest.raises(ValueError, match="block must be a positive int or None, got 0"):
        lm_loss(hidden, head, targets, block=0)
    with pytest.raises(ValueError, match=r"head must be \[hidden=8, vocab\], got shape \(37, 8\)"):
        token_logprobs(hidden, head.T, targets)


# --------------------------------------------------------------------------- the model's loss

def _materialised_loss(model, params, batch, z_weight):
    """The loss as it was before blocks: every logit of the model, then the weighted means."""
    from levanter.data.chat import ROW_IDS, ROW_SEGMENTS, loss_weights

    if batch.ndim == 3:
        tokens, segments = batch[:, ROW_IDS], batch[:, ROW_SEGMENTS]
        logits = model.apply(params, None, tokens[:, :-1], segment_ids=segments[:, :-1])
        weights = loss_weights(batch).astype(jnp.float32)
    else:
        tokens = batch
        logits = model.apply(params, None, tokens[:, :-1])
        weights = jnp.ones(tokens[:, 1:].shape)
    targets = tokens[:, 1:]
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    count = jnp.maximum(jnp.sum(weights), 1.0)
    return (jnp.sum((lse - picked) * weights) + z_weight * jnp.sum(lse * lse * weights)) / count


def _chat_batch(rng, vocab, rows, length):
    """``[rows, 3, length]`` windows: ids, a loss mask, three segments a row (padding 0 at the end)."""
    ids = rng.integers(1, vocab, size=(rows, length))
    mask = rng.integers(0, 2, size=(rows, length))
    cut = sorted(rng.choice(np.arange(2, length - 2), size=2, replace=False))
    segments = np.concatenate([np.full(cut[0], 1), np.full(cut[1] - cut[0], 2), np.full(length - cut[1] - 1, 3),
                               [0]])
    return np.stack([ids, mask, np.broadcast_to(segments, (rows, length))], axis=1).astype(np.int32)


@pytest.mark.parametrize("chat", [False, True])
def test_model_loss_equals_the_materialised_one(chat):
    from levanter.models.llama import LlamaConfig
    from levanter.training.loss import loss_fn, sequence_logprobs

    config = LlamaConfig(vocab_size=61, hidden_dim=16, intermediate_dim=32, num_heads=4, num_kv_heads=2, num_layers=2)
    model = config.build()
    params = jax.tree.map(jnp.asarray, random_params(config))  # numpy's draw: Haiku's init compiles for seconds
    rng = np.random.default_rng(1)
    batch = jnp.asarray(_chat_batch(rng, 61, 2, 22) if chat else rng.integers(0, 61, size=(2, 22)), jnp.int32)

    @jax.jit
    def run(p):
        blockwise = jax.value_and_grad(lambda q: loss_fn(model, q, batch, jnp.float32, 1e-3, block=4))(p)
        materialised = jax.value_and_grad(lambda q: _materialised_loss(model, q, batch, 1e-3))(p)
        # Per-row sums of the counted targets' log-probabilities: the mean loss's numerator, row by row.
        sums = sequence_logprobs(model, p, batch, block=3)
        return blockwise, materialised, sums, loss_fn(model, p, batch, jnp.float32, block=3)

    got, want, sums, plain = run(params)
    _close(got, want, rtol=1e-5, atol=1e-6)
    from levanter.data.chat import loss_weights

    count = float(np.asarray(loss_weights(np.asarray(batch))).sum()) if chat else float(batch[:, 1:].size)
    np.testing.assert_allclose(-float(sums.sum()) / count, float(plain), rtol=1e-5)


def test_bfloat16_gradient_rounds_as_the_materialised_one():
    # The head's summed gradient used to be rounded to bfloat16 in the forward and again after the
    # backward's scaling: 1.25x the materialised loss's error (relative, against float32). Now
    # float32 until scaled: one rounding (what is left is the block's bfloat16 logits gradient).
    # Enough values that the errors' norms are stable.
    hidden, head, targets, weights = head_problem(3, batch=4, seq=64, hidden=64, vocab=1000, head_scale=0.2)

    def materialised(h, w):
        logits = jnp.einsum("btd,dv->btv", h, w, preferred_element_type=jnp.float32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return jnp.sum((lse - picked + 1e-2 * lse * lse) * weights) / jnp.maximum(jnp.sum(weights), 1.0)

    def blockwise(h, w):
        return lm_loss(h, w, targets, weights, z_weight=1e-2, block=8)[0]

    exact = jax.jit(jax.grad(materialised, argnums=(0, 1)))(hidden, head)
    low = (hidden.astype(jnp.bfloat16), head.astype(jnp.bfloat16))

    def errors(fn):
        grads = jax.jit(jax.grad(fn, argnums=(0, 1)))(*low)
        # The norms in numpy: no program per operation.
        return [float(np.linalg.norm(np.asarray(g, np.float32) - e) / np.linalg.norm(e))
                for g, e in zip(grads, map(np.asarray, exact), strict=True)]

    ours, theirs = errors(blockwise), errors(materialised)
    assert ours[0] <= 1.1 * theirs[0] and ours[1] <= 1.1 * theirs[1], (ours, theirs)
