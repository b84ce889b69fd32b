"""``benchmarks/bench_splash``'s choices (no kernel runs): the sweep's grid, the blocks its rows
choose, and the table lines the lead pastes into ``levanter/ops/splash_tiles.py``."""

from __future__ import annotations

import dataclasses

from benchmarks.bench_splash import BLOCK_LIMIT, SCORES_LIMIT, choose, entries, grid, source
from levanter.ops.splash_tiles import SplashBlocks

_FORWARD = ("q", "kv", "kv_compute")
_DKV = ("q_dkv", "kv_dkv", "kv_dkv_compute")
_FLAGS = ("fused", "kv_seq_minor")


def _fields(blocks: SplashBlocks, names: tuple[str, ...]) -> tuple:
    return tuple(getattr(blocks, n) for n in names)


def test_the_grid_varies_one_kernel_at_a_time_within_the_sequence_and_vector_memory():
    rows = grid(2048)
    default = SplashBlocks().for_seq(2048)
    assert {stage for stage, _ in rows} == {"fwd", "layout", "dkv", "dq", "fused"}
    for stage, blocks in rows:
        values = [getattr(blocks, f.name) for f in dataclasses.fields(blocks) if f.name not in _FLAGS]
        assert all(2048 % v == 0 for v in values)
        assert blocks.q * blocks.kv_compute <= SCORES_LIMIT and blocks.q_dkv * blocks.kv_dkv_compute <= SCORES_LIMIT
        assert blocks.q * blocks.kv <= BLOCK_LIMIT
        own = {"fwd": _FORWARD, "dkv": _DKV, "fused": _DKV, "dq": ("q_dq", "kv_dq"), "layout": ()}[stage]
        others = [f.name for f in dataclasses.fields(blocks) if f.name not in (*own, *_FLAGS, "q_dq", "kv_dq")]
        assert _fields(blocks, tuple(others)) == _fields(default, tuple(others)), (stage, blocks)
        assert blocks.fused == (stage == "fused")
    assert ("fwd", SplashBlocks(q=1024, kv=2048, kv_compute=512)) in rows
    assert ("fwd", SplashBlocks(q=2048, kv=1024, kv_compute=512)) in rows
    assert not any(stage == "fwd" and b.q == 2048 and b.kv == 2048 for stage, b in rows)
    assert ("dkv", SplashBlocks(q_dkv=2048, kv_dkv=2048, kv_dkv_compute=512)) in rows


def test_the_best_of_each_kernel_are_put_together_and_summed_over_a_keys_problems():
    sweep = [{"stage": "fwd", "blocks": SplashBlocks(q=1024, kv=1024, kv_compute=512), "ms": 1.0},
             {"stage": "fwd", "blocks": SplashBlocks(), "ms": 1.5},
             {"stage": "dkv", "blocks": SplashBlocks(q_dkv=256, kv_dkv=1024, kv_dkv_compute=1024), "ms": 4.0},
             {"stage": "dkv", "blocks": SplashBlocks(q_dkv=1024), "ms": None},  # did not compile
             {"stage": "dq", "blocks": SplashBlocks(q_dq=1024, kv_dq=256), "ms": 3.0},
             {"stage": "layout", "blocks": SplashBlocks(), "ms": 6.0},
             {"stage": "layout", "blocks": SplashBlocks(kv_seq_minor=True), "ms": 5.0},
             {"stage": "fused", "blocks": SplashBlocks(q_dkv=1024, kv_dkv=1024, kv_dkv_compute=1024, fused=True),
              "ms": 3.5}]
    unfused, fused = choose(sweep)
    assert unfused == SplashBlocks(q=1024, kv=1024, kv_compute=512, q_dkv=256, kv_dkv=1024, kv_dkv_compute=1024,
                                   q_dq=1024, kv_dq=256, kv_seq_minor=True)
    assert fused == SplashBlocks(q=1024, kv=1024, kv_compute=512, q_dkv=1024, kv_dkv=1024, kv_dkv_compute=1024,
                                 fused=True, kv_seq_minor=True)
    # 150m is faster unfused, 600m fused; summed, fused wins the shared (64, 1024) entry.
    final = [{"problem": p, "key": (64, 1024), "blocks": b, "ms": ms} for p, b, ms in (
        ("150m", SplashBlocks(), 10.0), ("150m", unfused, 6.0), ("150m", fused, 7.0), ("150m", None, 20.0),
        ("600m", SplashBlocks(), 10.0), ("600m", unfused, 8.0), ("600m", fused, 5.0))]
    lines = entries(final, "TPU v5 lite")
    assert lines[0].startswith('    "TPU v5 lite": {') and lines[-1] == "    },"
    assert lines[1].startswith(f"        (64, 1024): {source(fused)},  # 150m, 600m: 12.00 ms vs default 20.00 ms")
    assert eval(source(fused)) == fused and eval(source(unfused)) == unfused  # noqa: S307 - our own repr
