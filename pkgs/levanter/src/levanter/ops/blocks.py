"""Block sizes of the blockwise output softmax (no JAX import: the memory estimate reads them too)."""

from __future__ import annotations

__all__ = ["BLOCK_LOGITS", "default_block"]

BLOCK_LOGITS = 1 << 25
"""Logits per block the default aims at (32 Mi float32 values, 128 MiB): what one step holds."""


def default_block(batch: int, seq_len: int, vocab: int) -> int:
    """Positions per block: about ``BLOCK_LOGITS / vocab`` logits rows over the whole batch, a power
    of two (so ``batch x block`` rows fill the 128-wide matrix units), at most ``seq_len``."""
    rows = max(BLOCK_LOGITS // max(vocab, 1), 1)
    per_row = max(rows // max(batch, 1), 1)
    block = 1 << (per_row.bit_length() - 1)
    return max(1, min(block, seq_len))
