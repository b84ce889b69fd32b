"""Block sizes of the blockwise output softmax (no JAX import: the memory estimate reads them too)."""

from __future__ import annotations

__all__ = ["BLOCK_LOGITS", "SCOPE", "default_block"]

SCOPE = "cross_entropy"
"""The name scope of every op of the blockwise softmax: XLA keeps it in the ops' metadata, so a
profile (``benchmarks/device_profile``) can tell the output head's share of a step."""

BLOCK_LOGITS = 1 << 27
"""Logits per block the default aims at (128 Mi float32 values, 512 MiB): what one step holds.

Each block adds its share to the head's float32 gradient (``hidden x vocab``), a read and a write
of the whole gradient per block, so fewer, larger blocks cost less: on a TPU v5e, ``llama_150m``
(vocabulary 128,256) at 32 x 1024 with blocks of 8 positions (32 Mi logits, 128 blocks a step)
spent 17% of its step (about 122 ms of 367) in that one accumulation, as its 0.8 GB a block at the
chip's 819 GB/s predicts. At 128 Mi logits a block of 1,024 rows makes it a quarter of that, and
the step still fits the chip (``levanter.memory_estimate`` counts the block)."""


def default_block(batch: int, seq_len: int, vocab: int) -> int:
    """Positions per block: about ``BLOCK_LOGITS / vocab`` logits rows over the whole batch, a power
    of two (so ``batch x block`` rows fill the 128-wide matrix units), at most ``seq_len``."""
    rows = max(BLOCK_LOGITS // max(vocab, 1), 1)
    per_row = max(rows // max(batch, 1), 1)
    block = 1 << (per_row.bit_length() - 1)
    return max(1, min(block, seq_len))
