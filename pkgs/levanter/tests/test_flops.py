"""FLOPs accounting: model FLOPs and parameters of a Llama by hand, datasheet peaks, XLA's count, MFU/HFU."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest

from levanter.flops import (
    CONFIG_SOURCE,
    MEASURED_SOURCE,
    FlopsSummary,
    PeakFlops,
    compiled_step_flops,
    peak_flops,
    utilisation,
)
from levanter.models.llama import LlamaConfig

SMALL = LlamaConfig(vocab_size=64, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=1, num_layers=2,
                    max_seq_len=64)


def test_flops_per_token_of_a_small_llama_by_hand():
    # head_dim = 32 / 2 = 16; one kv head: k and v project 32 -> 16.
    # Matmul weights of one layer: q 32*32 = 1024, k 32*16 = 512, v 512, o 1024,
    # gate 32*64 = 2048, up 2048, down 2048: 9216; two layers 18432; lm_head 32*64 = 2048.
    # 6 FLOPs per weight: 6 * (18432 + 2048) = 122880.
    # Attention at seq_len 32: 12 * layers * hidden * seq_len = 12 * 2 * 32 * 32 = 24576.
    assert SMALL.flops_per_token(32) == 122880 + 24576 == 147456
    # Tied embeddings drop nothing: the output projection is still a matmul (with the embedding matrix).
    assert dataclasses.replace(SMALL, tie_embeddings=True).flops_per_token(32) == 147456
    # The attention term alone grows with the context.
    assert SMALL.flops_per_token(64) - SMALL.flops_per_token(32) == 12 * 2 * 32 * 32


@pytest.mark.parametrize("tie", [False, True])
def test_num_params_is_the_initialised_models_count(tie):
    config = dataclasses.replace(SMALL, tie_embeddings=tie)
    # The shapes the init makes (nothing compiled or computed).
    params = jax.eval_shape(config.build(jnp.float32).init, jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
    counted = sum(leaf.size for leaf in jax.tree.leaves(params))
    assert config.num_params() == counted
    # embed 64*32 = 2048; per layer 9216 matmul weights + 2 norms of 32; final norm 32; lm_head 2048 untied.
    assert counted == 2048 + 2 * (9216 + 64) + 32 + (0 if tie else 2048)


class _Device:
    def __init__(self, kind: str):
        self.device_kind = kind


@pytest.mark.parametrize("kind, peak", [
    ("TPU v4", 275e12),
    ("TPU v5 lite", 197e12),
    ("TPU v5", 459e12),
    ("TPU v5p", 459e12),
    ("TPU v6 lite", 918e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA B200", 2250e12),
])
def test_datasheet_peak_of_the_device_kinds_jax_reports(kind, peak):
    assert peak_flops(jnp.bfloat16, _Device(kind)) == PeakFlops(peak, f"datasheet:{kind}")


def test_an_unknown_device_is_measured():
    found = peak_flops(jnp.float32, jax.devices("cpu")[0])
    assert found.source == MEASURED_SOURCE and found.flops_per_s > 0


def test_compiled_flops_are_xlas_count_over_all_devices():
    m, k, n = 8, 16, 32
    compiled = jax.jit(lambda x, w: x @ w).lower(jnp.ones((m, k)), jnp.ones((k, n))).compile()
    assert compiled_step_flops(compiled, 1) == 2 * m * k * n
    # The analysis is of one device's program; the run's count scales it by the devices.
    assert compiled_step_flops(compiled, 4) == 4 * 2 * m * k * n


def test_summary_of_a_resumed_run():
    peak = PeakFlops(1e9, CONFIG_SOURCE)
    # 10 steps in all, the last 4 run by this attempt in 2 seconds on 2 devices.
    summary = FlopsSummary.of_run(num_params=100, flops_per_token=600.0, tokens_per_step=50, steps=10, steps_run=4,
                                  train_seconds=2.0, num_devices=2, peak=peak, step_hardware_flops=40000.0)
    assert summary.tokens_trained == 500
    assert summary.model_flops == 600.0 * 500
    assert summary.hardware_flops == 40000.0 * 10
    assert summary.mfu == pytest.approx(600.0 * 50 * 4 / 2.0 / (2 * 1e9))
    assert summary.hfu == pytest.approx(40000.0 * 4 / 2.0 / (2 * 1e9))
    assert (summary.peak_flops_per_device, summary.peak_flops_source) == (1e9, "config")


def test_summary_without_steps_or_analysis_has_no_utilisation():
    peak = PeakFlops(1e9, CONFIG_SOURCE)
    idle = FlopsSummary.of_run(num_params=1, flops_per_token=6.0, tokens_per_step=4, steps=3, steps_run=0,
                               train_seconds=0.0, num_devices=1, peak=peak, step_hardware_flops=None)
    assert idle.model_flops == 72.0 and idle.hardware_flops is None
    assert idle.mfu is None and idle.hfu is None
    assert math.isnan(utilisation(1.0, 0.0, 1, 1e9))
