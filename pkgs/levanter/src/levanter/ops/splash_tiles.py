"""The splash attention kernel's tiles: how large a block of queries and keys each of its three
kernels (forward, ``dkv`` and ``dq`` of the backward, or one fused backward) takes, chosen per chip
and problem (head dimension, sequence length) from measurements (``benchmarks/bench_splash.py``).

Tiles change how attention is computed, not what: the same sums in another order (bfloat16 inputs,
float32 accumulation). They are never part of a run's identity.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["DEFAULT_BLOCK", "LANES", "SplashBlocks", "measured_tiles", "splash_blocks"]

DEFAULT_BLOCK = 512
"""Every block of the kernels where no measurement chose them (cut to the sequence: see
:meth:`SplashBlocks.for_seq`)."""

LANES = 128
"""The kernels' blocks are multiples of the vector lanes (a sequence must be one too)."""


@dataclasses.dataclass(frozen=True)
class SplashBlocks:
    """Block sizes of the three splash kernels (positions; each a multiple of 128)."""

    q: int = DEFAULT_BLOCK
    """Forward: queries per block."""
    kv: int = DEFAULT_BLOCK
    """Forward: keys per block fetched from HBM."""
    kv_compute: int = DEFAULT_BLOCK
    """Forward: keys per step of the inner loop (divides ``kv``)."""
    q_dkv: int = DEFAULT_BLOCK
    """Backward ``dkv`` kernel (or the fused one): queries per block."""
    kv_dkv: int = DEFAULT_BLOCK
    """Backward ``dkv`` kernel (or the fused one): keys per block."""
    kv_dkv_compute: int = DEFAULT_BLOCK
    """Backward ``dkv`` kernel: keys per inner step (divides ``kv_dkv``)."""
    q_dq: int = DEFAULT_BLOCK
    """Backward ``dq`` kernel: queries per block (unused when ``fused``)."""
    kv_dq: int = DEFAULT_BLOCK
    """Backward ``dq`` kernel: keys per block (unused when ``fused``)."""
    fused: bool = False
    """One backward kernel makes ``dq`` with ``dk`` and ``dv`` (JAX's ``use_fused_bwd_kernel``)."""
    kv_seq_minor: bool = False
    """Keys and values laid out ``[head_dim, seq]`` for the kernels (JAX's ``QKVLayout.SEQ_MINOR``):
    a head narrower than the 128 lanes then fills them with positions instead of padding."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name not in _FLAGS and (not isinstance(value, int) or value <= 0 or value % LANES):
                raise ValueError(f"SplashBlocks.{field.name} must be a positive multiple of {LANES}, got {value!r}")
        for inner, outer in _NESTED:
            if getattr(self, outer) % getattr(self, inner):
                raise ValueError(f"SplashBlocks.{inner} must divide {outer}, got {getattr(self, inner)} and "
                                 f"{getattr(self, outer)}")

    @classmethod
    def square(cls, size: int) -> SplashBlocks:
        """Every block ``size`` (the kernels' tiles before they were measured per chip)."""
        return cls(size, size, size, size, size, size, size, size)

    def for_seq(self, seq_len: int) -> SplashBlocks:
        """These blocks cut to ``seq_len``: each the largest multiple of 128 up to it dividing
        ``seq_len`` (and each inner block dividing its outer one)."""
        sizes = {f.name: _divisor(seq_len, getattr(self, f.name)) for f in dataclasses.fields(self)
                 if f.name not in _FLAGS}
        for inner, outer in _NESTED:
            sizes[inner] = _divisor(sizes[outer], sizes[inner])
        return dataclasses.replace(self, **sizes)

    def block_sizes(self) -> Any:
        """JAX's ``splash_attention_kernel.BlockSizes`` of these blocks."""
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

        # The fused backward makes dq itself: JAX refuses dq blocks beside it.
        layout = sk.QKVLayout.SEQ_MINOR if self.kv_seq_minor else sk.QKVLayout.HEAD_DIM_MINOR
        return sk.BlockSizes(block_q=self.q, block_kv=self.kv, block_kv_compute=self.kv_compute,
                             block_q_dkv=self.q_dkv, block_kv_dkv=self.kv_dkv,
                             block_kv_dkv_compute=self.kv_dkv_compute, use_fused_bwd_kernel=self.fused,
                             block_q_dq=None if self.fused else self.q_dq,
                             block_kv_dq=None if self.fused else self.kv_dq, k_layout=layout, v_layout=layout)


_FLAGS = ("fused", "kv_seq_minor")
"""The fields of :class:`SplashBlocks` that are no block size."""

_NESTED = (("kv_compute", "kv"), ("kv_dkv_compute", "kv_dkv"))
"""(inner, outer) blocks of :class:`SplashBlocks`: the inner loop's block divides the fetched one."""


def _divisor(seq_len: int, largest: int) -> int:
    """The largest multiple of 128 up to ``largest`` dividing ``seq_len``."""
    for size in range(min(largest, seq_len) // LANES * LANES, 0, -LANES):
        if seq_len % size == 0:
            return size
    raise ValueError(f"splash attention needs a sequence length that is a multiple of {LANES}, got {seq_len}")


# Measured tiles by chip (the start of JAX's ``device_kind``) and (head dimension, sequence length).
# An entry holds what benchmarks/bench_splash.py measured fastest on that chip for that problem
# (the lines it prints after its table); a problem not here gets the default.
_MEASURED: dict[str, dict[tuple[int, int], SplashBlocks]] = {
    "TPU v5 lite": {  # v5e; bench_splash on the chip, 2026-12-06 (forward and backward, ms a layer)
        # llama_150m 32 x 1024, llama_600m 16 x 1024: 10.94 ms against the 512 default's 11.91 ms
        (64, 1024): SplashBlocks(q=1024, kv=1024, kv_compute=512, q_dkv=1024, kv_dkv=1024, kv_dkv_compute=512,
                                 q_dq=512, kv_dq=512, kv_seq_minor=True),
        # llama_150m 8 x 4096: 12.39 ms against 14.25 ms
        (64, 4096): SplashBlocks(q=1024, kv=1024, kv_compute=512, q_dkv=1024, kv_dkv=1024, kv_dkv_compute=1024,
                                 q_dq=512, kv_dq=512, kv_seq_minor=True),
        # llama_1_4b 8 x 2048: 8.45 ms against 8.99 ms
        (128, 2048): SplashBlocks(q=1024, kv=1024, kv_compute=512, q_dkv=1024, kv_dkv=1024, kv_dkv_compute=512,
                                  q_dq=512, kv_dq=512),
    },
}


def measured_tiles(device_kind: str) -> dict[tuple[int, int], SplashBlocks]:
    """The measured tiles of the chip ``device_kind`` names (empty for a chip never measured)."""
    return next((table for chip, table in _MEASURED.items() if device_kind.startswith(chip)), {})


def splash_blocks(head_dim: int, seq_len: int, device_kind: str) -> SplashBlocks:
    """The kernels' blocks for heads of ``head_dim`` over ``seq_len`` positions on ``device_kind``:
    the measured ones where that chip and problem were measured, else the default, cut to the
    sequence."""
    return measured_tiles(device_kind).get((head_dim, seq_len), SplashBlocks()).for_seq(seq_len)
