"""How, not what: remat policies, scanned layers and the splash kernel give the loss and gradients
of the plain model (float32: its rounding; the kernel in bfloat16: bfloat16's)."""

from __future__ import annotations

import re

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from levanter.config import TrainerConfig
from levanter.models._llama_haiku import remat_policy
from levanter.models.impl import UNROLL_LAYERS_UP_TO, Attention, Impl, Remat, resolve_unroll
from levanter.models.layout import stack_layers, unstack_layers
from levanter.models.llama import LlamaConfig
from levanter.ops.attention import splash_attention, xla_attention
from levanter.ops.splash_tiles import SplashBlocks
from levanter.training.loss import loss_fn
from testsupport.levanter_data import random_params

CONFIG = LlamaConfig(vocab_size=53, hidden_dim=16, intermediate_dim=24, num_heads=4, num_kv_heads=2, num_layers=2)


def _chat_batch(rows: int, length: int, seed: int = 0) -> jnp.ndarray:
    """``[rows, 3, length]`` chat windows, several conversations a row (segments 1, 2, 3, padding)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, CONFIG.vocab_size, size=(rows, length))
    mask = rng.integers(0, 2, size=(rows, length))
    segments = np.zeros((rows, length), np.int64)
    for r in range(rows):
        cuts = np.sort(rng.choice(np.arange(3, length - 3), size=2, replace=False))
        segments[r, :cuts[0]], segments[r, cuts[0]:cuts[1]], segments[r, cuts[1]:length - 2] = 1, 2, 3
    return jnp.asarray(np.stack([ids, mask, segments], axis=1), jnp.int32)


@pytest.fixture(scope="module")
def params():
    # numpy's draw (Haiku's init compiles for seconds), kept in numpy: unstacked without a program.
    return random_params(CONFIG)


def _compiled(impl: Impl, params, batch):
    """``(compiled program, its input)``: the loss and (stacked) gradients of ``impl``'s model on
    ``batch``, compiled once for both the equality and the memory of its backward pass."""
    model = CONFIG.build(jnp.float32, impl=impl)
    p = params if impl.scan_layers else unstack_layers(params)

    @jax.jit  # the unrolled model's gradients stacked in the program, not an eager program per leaf
    def run(q):
        value, grads = jax.value_and_grad(lambda r: loss_fn(model, r, batch, jnp.float32, 1e-3))(q)
        return value, (grads if impl.scan_layers else stack_layers(grads))

    return run.lower(p).compile(), p


@pytest.fixture(scope="module")
def plain(params):
    """The unrolled model without remat: what every variant must equal."""
    program, p = _compiled(Impl(remat=Remat.NONE, attention=Attention.XLA, scan_layers=False), params, _chat_batch(2, 17))
    return program(p)


@pytest.fixture(scope="module")
def policies(params):
    """Each remat policy's compiled step (scanned layers), built on first use and shared by the tests."""
    built: dict[Remat, tuple] = {}

    def get(remat: Remat):
        if remat not in built:
            built[remat] = _compiled(Impl(remat=remat, attention=Attention.XLA), params, _chat_batch(2, 17))
        return built[remat]

    return get


@pytest.mark.parametrize("remat", [Remat.NONE, Remat.SAVE_DOTS, Remat.SAVE_ATTENTION, Remat.FULL, Remat.OFFLOAD])
def test_every_remat_policy_gives_the_plain_models_loss_and_gradients(policies, plain, remat):
    want_value, want = plain
    program, p = policies(remat)
    value, grads = program(p)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-6)
    for got, exp in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-6)


def test_remat_policies_keep_less_for_the_backward_pass(policies):
    # The programs the test above runs: what each keeps for the backward pass is XLA's temporaries
    # (measured: 157 kB without remat, 79 kB saving dots, 70 kB recomputing everything).
    def temporaries(remat: Remat) -> int:
        return policies(remat)[0].memory_analysis().temp_size_in_bytes

    none, dots, full = temporaries(Remat.NONE), temporaries(Remat.SAVE_DOTS), temporaries(Remat.FULL)
    assert none > dots > full


def test_offload_moves_the_attention_projections_to_host_memory(params):
    """What a TPU compiles: the traced step puts each offloaded name in the host's memory space in
    the forward pass and brings it back for the backward (the CPU backend lowers these copies to
    nothing, so the equality above is all the CPU runs)."""
    model = CONFIG.build(jnp.float32, impl=Impl(remat=Remat.OFFLOAD, attention=Attention.XLA))
    jaxpr = jax.make_jaxpr(jax.grad(lambda p: loss_fn(model, p, _chat_batch(2, 17), jnp.float32)))(params)
    moves = [eqn.params["devices"][0] for eqn in _equations(jaxpr.jaxpr) if eqn.primitive.name == "device_put"]
    host, device = jax.memory.Space.Host, jax.memory.Space.Device
    # q, k, v and the attention output: out to the host once each, back once each.
    assert (moves.count(host), moves.count(device)) == (4, 4)


def _equations(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs inside it (scans, remat)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from _equations(inner)


def test_layers_unrolled_in_the_scan_give_the_plain_models_loss_and_gradients(params, plain, policies):
    """``Impl.unroll``: both layers in one iteration of the scan (no loop left), the same stacked weights."""
    impl = Impl(remat=Remat.SAVE_ATTENTION, attention=Attention.XLA, unroll=CONFIG.num_layers)
    program, p = _compiled(impl, params, _chat_batch(2, 17))
    # The same policy scanned a layer at a time (a test above compiled it) has the layers' two loops
    # (forward, backward) beside the loss's.
    def loops(compiled) -> int:
        return len(re.findall(r" while\(", compiled.as_text()))

    assert loops(program) == loops(policies(Remat.SAVE_ATTENTION)[0]) - 2
    want_value, want = plain
    value, grads = program(p)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-6)
    for got, exp in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="unroll must be an int >= 1"):
        Impl(unroll=0)


def test_small_stacks_are_unrolled_on_a_tpu_only_unless_a_count_is_asked_for(monkeypatch):
    assert resolve_unroll(None, 6) == 1 and resolve_unroll(3, 6) == 3  # this CPU: one layer an iteration
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert resolve_unroll(None, UNROLL_LAYERS_UP_TO) == UNROLL_LAYERS_UP_TO
    assert resolve_unroll(None, UNROLL_LAYERS_UP_TO + 1) == 1 and resolve_unroll(2, 24) == 2
    with pytest.raises(ValueError, match="layer_unroll must be a positive int or None, got 0"):
        TrainerConfig(layer_unroll=0)


def test_scanned_layers_compile_one_layer_whatever_the_depth():
    def hlo_lines(layers: int, scan: bool) -> int:
        config = LlamaConfig(vocab_size=64, hidden_dim=16, intermediate_dim=32, num_heads=2, num_kv_heads=2,
                             num_layers=layers)
        model = config.build(jnp.float32, impl=Impl(attention=Attention.XLA, scan_layers=scan))
        params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32))
        grad = jax.jit(jax.grad(lambda p, b: loss_fn(model, p, b, jnp.float32)))
        return len(grad.lower(params, jax.ShapeDtypeStruct((2, 9), jnp.int32)).as_text().splitlines())

    assert hlo_lines(6, True) == hlo_lines(2, True)
    assert hlo_lines(6, False) > 2 * hlo_lines(2, False)


def test_splash_kernel_matches_xla_attention_on_packed_rows():
    """The Pallas kernel (interpreted on the CPU) against the einsums: bfloat16, causal, grouped
    heads, three documents in a row; forward and the gradients of q, k and v."""
    b, t, kv, group, hd = 2, 256, 2, 2, 32
    rng = np.random.default_rng(0)  # numpy's draw: JAX's samplers, eager, compile a program per shape
    q = jnp.asarray(rng.standard_normal((b, t, kv, group, hd)), jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((b, t, kv, hd)), jnp.bfloat16)
    v = jnp.asarray(rng.standard_normal((b, t, kv, hd)), jnp.bfloat16)
    segments = jnp.asarray([[1] * 100 + [2] * 80 + [3] * 76, [1] * 30 + [2] * 200 + [3] * 20 + [0] * 6], jnp.int32)
    cotangent = jnp.asarray(rng.standard_normal((b, t, kv * group * hd)), jnp.float32)

    def run(attend):
        def objective(q, k, v):
            out = attend(q, k, v, segments)
            return jnp.sum(out.astype(jnp.float32) * cotangent), out
        return jax.jit(jax.value_and_grad(objective, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    (_, want), want_grads = run(xla_attention)
    (_, got), got_grads = run(lambda *a: splash_attention(*a, blocks=SplashBlocks.square(128), interpret=True))

    def rel(a, c):
        a, c = np.asarray(a, np.float32), np.asarray(c, np.float32)
        return np.abs(a - c).max() / np.abs(a).max()

    assert rel(want, got) < 2e-2
    for exp, out in zip(want_grads, got_grads, strict=True):
        assert rel(exp, out) < 3e-2
    # The tolerance has teeth: attention without the segments is far off on a packed row.
    (_, unpacked), _ = run(lambda q_, k_, v_, _s: xla_attention(q_, k_, v_, None))
    assert rel(want, unpacked) > 0.1


def test_one_splash_kernel_serves_every_program_that_traces_it():
    """The kernel of a shape is built once, inside the first trace that asks for it (a training
    step), and reused by later programs (the evaluation): its mask tables must not be that first
    trace's tracers. (On the chip, train_nano's first evaluation failed with JAX's
    UnexpectedTracerError before the kernel was built eagerly.)"""
    b, t, kv, group, hd = 1, 384, 1, 3, 32  # a shape no other test builds a kernel for
    q = jnp.ones((b, t, kv, group, hd), jnp.float32)
    k = v = jnp.ones((b, t, kv, hd), jnp.float32)
    segments = jnp.zeros((b, t), jnp.int32)

    def attend(q_, k_, v_, s_):
        return splash_attention(q_, k_, v_, s_, blocks=SplashBlocks.square(128), interpret=True)

    grads = jax.jit(jax.grad(lambda *a: attend(*a).sum()))(q, k, v, segments)
    evaluated = jax.jit(lambda *a: attend(*a).mean())(q, k, v, segments)
    assert grads.shape == q.shape
    assert float(evaluated) == pytest.approx(1.0)  # v is all ones: every output is 1


@pytest.mark.parametrize(("remat", "again"), [(Remat.SAVE_ATTENTION, False), (Remat.OFFLOAD, False), (Remat.FULL, True)])
def test_a_policy_keeping_attention_keeps_the_splash_kernels_residuals(remat, again):
    """``SAVE_ATTENTION`` (and ``OFFLOAD``) keep what the splash kernel's backward reads, its output and
    log-sum-exp as it lays them out (``levanter.ops.attention.SAVED``), so the compiled step runs its
    forward kernel in the forward pass only; recomputing everything runs it again in the backward
    pass. (The output named after its transpose left the kernel running twice: 27 ms of llama_600m's
    572 ms step on the v5e.)"""
    b, t, kv, group, hd = 1, 256, 1, 2, 32
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((b, t, kv, group, hd)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((b, t, kv, hd)), jnp.float32) for _ in range(2))

    def layer(q_, k_, v_):
        out = splash_attention(q_, k_, v_, blocks=SplashBlocks.square(128), interpret=True)
        return jnp.sum(jnp.sin(out))  # not linear: the backward pass needs the output itself

    step = jax.jit(jax.grad(jax.checkpoint(layer, policy=remat_policy(remat)), argnums=(0, 1, 2)))
    names = set(re.findall(r'op_name="([^"]*)"', step.lower(q, k, v).compile().as_text()))
    forward = {n for n in names if "splash_mha_fwd" in n}
    assert forward and any("splash_mha_dq" in n for n in names)
    # The backward pass's ops are named by JAX's transpose; a kernel run again there is among them.
    assert any("transpose(" in n for n in forward) is again


def test_save_dots_keeps_the_layers_projections_and_not_the_rotary_swap(capsys):
    """``SAVE_DOTS`` keeps the weight matmuls' outputs a layer's backward reads (q, k, v, o, gate, up; down's
    feeds only the layer's output), in the compute dtype; the rotary embedding's swap (``levanter.ops.rotary``), also a matmul, is made again:
    kept, its float32 output took 3.7 GiB more at llama_600m 16 x 1024 on the v5e."""
    import haiku as hk
    from jax.ad_checkpoint import print_saved_residuals

    from levanter.models._llama_haiku import _layer, _no_shard

    impl = Impl(remat=Remat.SAVE_DOTS, attention=Attention.XLA)

    def layer(x):
        block = hk.remat(lambda h: _layer(CONFIG, _no_shard, impl, h, None, jnp.arange(x.shape[1])),
                         policy=remat_policy(Remat.SAVE_DOTS))
        return block(x)

    model = hk.without_apply_rng(hk.transform(layer))
    x = jnp.ones((2, 8, CONFIG.hidden_dim), jnp.bfloat16)
    p = model.init(jax.random.PRNGKey(0), x)
    print_saved_residuals(lambda p_, x_: jnp.sum(model.apply(p_, x_).astype(jnp.float32)), p, x)
    dots = [line for line in capsys.readouterr().out.splitlines() if "output of dot_general" in line]
    assert len(dots) == 6 and all(line.startswith("bf16[") for line in dots), dots
