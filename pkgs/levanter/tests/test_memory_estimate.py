"""The shapes' memory estimate, remat="auto"'s choice, and the causal FLOPs count."""

from __future__ import annotations

from typing import Any

import pytest

from levanter.memory_estimate import HEADROOM, choose_remat, estimate_memory, step_phases
from levanter.models.impl import Remat
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig

# llama_150m's shape with the Llama 3 vocabulary.
M150 = LlamaConfig(vocab_size=128_256, hidden_dim=512, intermediate_dim=1792, num_heads=8, num_kv_heads=8,
                   num_layers=6, max_seq_len=1024)
GIB = 2**30


def _estimate(phase: str | None = None, **kwargs):
    """The estimate of M150 at 32 x 1024; with ``phase``, that moment of the step's (not the peak's)."""
    base = dict(batch=32, seq_len=1024, compute_bytes=2, remat="none", attention="splash")
    return estimate_memory(M150, **{**base, **kwargs}) if phase is None else \
        next(e for e in step_phases(M150, **{**base, **kwargs}) if e.phase == phase)


def test_each_policy_keeps_less_and_the_xla_kernel_keeps_scores():
    totals = [_estimate(remat=r).activations for r in ("none", "save_dots", "save_attention", "full")]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    assert _estimate(attention="xla").attention > 32 * 8 * 1024 * 1024 * 2 * 6  # bf16 probabilities, 6 layers
    assert _estimate().attention == 0
    # Parameters in float32, Adam's two moments in float32; at the layers' backward (the peak) the
    # layers' float32 gradients, the head's in the loss, the embedding's not made yet.
    params, head = M150.num_params() * 4, 4 * 128_256 * 512
    assert (_estimate().params, _estimate().opt_state, _estimate().phase) == (params, 2 * params, "backward")
    assert (_estimate().grads, _estimate().loss) == (params - 2 * head, head)


def test_compact_and_offloaded_optimizer_state_count_less():
    full = _estimate().opt_state
    assert _estimate(optimizer=AdamConfig(moment_dtype="bfloat16")).opt_state == full // 2
    factored = _estimate(optimizer=AdamConfig(moment_dtype="bfloat16", factored_second_moment=True)).opt_state
    assert full // 4 < factored < full // 2
    assert _estimate(offload_optimizer=True).opt_state == 2 * 4 * 128_256 * 512  # the largest array's, while updated


def test_the_pallas_loss_holds_one_staged_chunk_not_a_block():
    # The kernels' float32 gradients of the hidden states and the head and one staged chunk of float32
    # logits (1 GiB), whatever the block.
    pallas = _estimate(loss_impl="pallas", phase="loss").loss
    assert pallas == 32 * 1024 * 512 * 4 + (4 + 3 * 2) * 128_256 * 512 + 4 * 2**28
    assert pallas == _estimate(loss_impl="pallas", loss_block=8, phase="loss").loss
    assert _estimate(loss_block=8, phase="loss").loss < _estimate(phase="loss").loss  # the blockwise scan's grows


def test_the_blockwise_loss_keeps_the_hidden_states_float32_gradient_too():
    # Made in the forward scan beside the loss and kept for the backward (float32 until scaled):
    # [32 x 1024 tokens, 512] float32, as the kernels' is.
    hidden_grad = 32 * 1024 * 512 * 4
    # One float32 block of logits (their softmax and its gradient fused into it), the head's float32
    # gradient and its bfloat16 cast (XLA's TPU v5e buffer assignment, llama_1_4b 8 x 2048).
    assert _estimate(loss_block=8, phase="loss").loss == hidden_grad + 32 * 8 * 128_256 * 4 + (4 + 2) * 128_256 * 512


def test_auto_takes_the_least_recomputation_that_fits():
    kwargs: dict[str, Any] = dict(batch=32, seq_len=1024, compute_bytes=2, attention="splash")
    assert choose_remat(M150, 64 * GIB, **kwargs)[0] is Remat.NONE
    remat, estimate = choose_remat(M150, int(estimate_memory(M150, remat="save_dots", **kwargs).total * HEADROOM) + 1,
                                   **kwargs)
    assert remat is Remat.SAVE_DOTS and estimate.remat == "save_dots"
    remat, estimate = choose_remat(M150, GIB, **kwargs)  # nothing fits: the smallest, which does not fit
    assert remat is Remat.FULL and not estimate.fits(GIB)
    with pytest.raises(ValueError, match="estimate a policy, not remat='auto'"):
        estimate_memory(M150, remat="auto", **kwargs)


def test_offload_keeps_fulls_device_memory_and_counts_its_activations_on_the_host():
    offload, full, attention = _estimate(remat="offload"), _estimate(remat="full"), _estimate(remat="save_attention")
    assert offload.total == full.total and full.host == 0
    # SAVE_ATTENTION's activations but the layers' inputs (which stay on the device), in bfloat16: q,
    # k, v (512 + 2 x 512), the splash kernel's output (heads of 64 padded to 128 lanes: 2 x 512) and
    # its float32 log-sum-exp (8 heads, 2 x 8 bfloat16 values).
    assert offload.host == attention.activations - full.activations == 32 * 1024 * 2 * 6 * (512 + 2 * 512 + 2 * 512 + 2 * 8)
    # The XLA path's output is kept as it is: the hidden size.
    xla = _estimate(remat="save_attention", attention="xla").activations - _estimate(remat="full", attention="xla").activations
    assert xla == 32 * 1024 * 2 * 6 * (512 + 2 * 512 + 512)
    moments = _estimate(remat="offload", offload_optimizer=True)
    assert moments.host == offload.host + 2 * 4 * M150.num_params()  # the moments offloaded too


def test_offload_is_weighed_where_asked_for_and_auto_recomputes_instead():
    kwargs: dict[str, Any] = dict(batch=32, seq_len=1024, compute_bytes=2, attention="splash")
    full = estimate_memory(M150, remat="full", **kwargs)
    device = int(full.total * HEADROOM) + 1  # FULL fits the device, SAVE_ATTENTION does not
    assert not estimate_memory(M150, remat="save_attention", **kwargs).fits(device)
    # auto never offloads: measured slower than full on the chip, whatever room the host has.
    assert choose_remat(M150, device, host_available=64 * GIB, **kwargs)[0] is Remat.FULL
    asked = (Remat.NONE, Remat.SAVE_DOTS, Remat.SAVE_ATTENTION, Remat.OFFLOAD, Remat.FULL)
    host_needs = int(estimate_memory(M150, remat="offload", **kwargs).host * HEADROOM) + 1
    remat, estimate = choose_remat(M150, device, host_available=host_needs, candidates=asked, **kwargs)
    assert remat is Remat.OFFLOAD and estimate.host > 0
    assert choose_remat(M150, device, host_available=host_needs - 2, candidates=asked, **kwargs)[0] is Remat.FULL
    assert choose_remat(M150, device, candidates=asked, **kwargs)[0] is Remat.FULL  # no host memory given
    # Where SAVE_ATTENTION fits the device it keeps the same activations without their copies.
    roomy = int(estimate_memory(M150, remat="save_attention", **kwargs).total * HEADROOM) + 1
    assert choose_remat(M150, roomy, host_available=64 * GIB, candidates=asked, **kwargs)[0] is Remat.SAVE_ATTENTION
    # Nothing fits the device: the least device memory, of equals the one that recomputes less.
    assert choose_remat(M150, GIB, host_available=64 * GIB, candidates=asked, **kwargs)[0] is Remat.OFFLOAD
    assert choose_remat(M150, GIB, host_available=GIB, candidates=asked, **kwargs)[0] is Remat.FULL


def test_causal_count_halves_the_attention_products():
    full, causal = M150.flops_per_token(1024), M150.flops_per_token(1024, causal=True)
    assert full - causal == 6 * 6 * 512 * 1024
    assert causal == 6 * (M150.num_params() - 128_256 * 512) + 6 * 6 * 512 * 1024 - 6 * (2 * 6 * 512 + 512)


def test_xla_peak_counts_an_output_written_over_a_donated_argument_once():
    import jax
    import jax.numpy as jnp

    from levanter.memory import peak_bytes

    x, y = jnp.ones((256, 256)), jnp.ones((128, 128))

    def step(x, y):
        return x * 2, (y @ y).sum()

    donated = jax.jit(step, donate_argnums=0).lower(x, y).compile().memory_analysis()
    kept = jax.jit(step).lower(x, y).compile().memory_analysis()
    assert donated is not None and kept is not None
    held_donated, held_kept = peak_bytes(donated), peak_bytes(kept)
    assert held_donated is not None and held_kept is not None
    # Donated, the new x is written over the old: held once. Not donated, both are held.
    assert held_kept - held_donated == x.nbytes
    assert held_donated < donated.argument_size_in_bytes + donated.output_size_in_bytes


def test_compact_moments_are_counted_as_the_optimizer_holds_them():
    # bfloat16 first moment, factored second moment: a float32 row and column per matrix (stacked over
    # the layers), vectors whole. The estimate's bytes are the state's own (the old count, 5% of a full
    # second moment, was 36x too many for llama_1_4b).
    import jax

    from levanter.sharding import MeshConfig, make_mesh
    from levanter.training.state import abstract_state

    model = LlamaConfig(vocab_size=512, hidden_dim=64, intermediate_dim=128, num_heads=2, num_kv_heads=1,
                        num_layers=2, max_seq_len=64)
    optimizer = AdamConfig(moment_dtype="bfloat16", factored_second_moment=True)
    state = abstract_state(model, optimizer.at_rate(0.0), make_mesh(MeshConfig(), jax.devices()[:1]))
    moments = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(state.opt_state))
    estimate = estimate_memory(model, batch=2, seq_len=64, compute_bytes=2, remat="full", attention="xla",
                               optimizer=optimizer)
    assert abs(estimate.opt_state - moments) <= 64  # the state's counters and learning rate: a few scalars
