"""Block sizes of the blockwise output softmax, and which implementation of the loss over the head
runs (no JAX import: the memory estimate and the run's configuration read them too)."""

from __future__ import annotations

from levanter.choices import Choice

__all__ = ["BLOCK_LOGITS", "SCOPE", "STAGE_LOGITS", "LossImpl", "default_block"]


class LossImpl(Choice):
    """How the softmax over the head is computed (never what: each gives the same values and
    gradients within the dtype's rounding, ``tests/test_pallas_loss.py``)."""

    AUTO = "auto"
    """The Pallas kernels on a single TPU device for hidden states up to 2,048 wide, the blockwise scan
    elsewhere (``levanter.ops.cross_entropy.resolve_loss_impl``)."""
    BLOCKWISE = "blockwise"
    """A scan over blocks of positions, each block's logits materialised by XLA (any device, any mesh)."""
    PALLAS = "pallas"
    """Pallas TPU kernels that make each tile of logits once, in vector memory: the training loss's
    gradients in its forward from logits staged through HBM a chunk at a time
    (``levanter.ops.pallas_staged``), per-token log-probabilities with no logit in HBM
    (``levanter.ops.pallas_loss``). One device: a custom call XLA cannot split over a mesh; Pallas'
    interpreter off a TPU, slowly."""

    @classmethod
    def setting(cls) -> str:
        return "loss_impl"


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


STAGE_LOGITS = 1 << 28
"""Logits the staged Pallas kernels (``levanter.ops.pallas_staged``) hold in HBM at once: a chunk's
rows times the vocabulary tiles' columns, float32 (1 GiB)."""


def default_block(batch: int, seq_len: int, vocab: int) -> int:
    """Positions per block: about ``BLOCK_LOGITS / vocab`` logits rows over the whole batch, a power
    of two (so ``batch x block`` rows fill the 128-wide matrix units), at most ``seq_len``."""
    rows = max(BLOCK_LOGITS // max(vocab, 1), 1)
    per_row = max(rows // max(batch, 1), 1)
    block = 1 << (per_row.bit_length() - 1)
    return max(1, min(block, seq_len))
