"""How a model is computed, as opposed to what it computes: rematerialisation, the attention kernel,
the loss's blocks. None of these is part of a run's identity (``rigging.fields.unhashed_field``):
tests show each gives the same values and gradients within the dtype's rounding.

Importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses

from levanter.choices import Choice
from levanter.ops.blocks import LossImpl

__all__ = ["UNROLL_LAYERS_UP_TO", "Attention", "Decode", "DecodeHead", "Impl", "LossImpl", "Remat", "resolve_unroll"]


class Remat(Choice):
    """What the backward pass keeps of each layer's forward pass; the rest it recomputes."""

    AUTO = "auto"
    """The least recomputation whose memory estimate fits the device (``levanter.memory_estimate``)."""
    NONE = "none"
    """Keep every activation (fastest; the most memory)."""
    SAVE_DOTS = "save_dots"
    """Keep the outputs of the weight matmuls (projections, MLP); recompute norms, rotary
    embeddings, attention and activation functions."""
    SAVE_ATTENTION = "save_attention"
    """Keep q, k, v and what attention's backward reads (its kernel's output, and the splash kernel's
    log-sum-exp: ``levanter.ops.attention.SAVED``); recompute the MLP and the output projection."""
    FULL = "full"
    """Keep each layer's input only; recompute the whole layer (the least memory)."""
    OFFLOAD = "offload"
    """Keep what ``SAVE_ATTENTION`` keeps, but in the host's memory: q, k, v and attention's
    output go to pinned host memory in the forward pass and come back for the backward; the
    device keeps each layer's input only, as ``FULL`` does, and the MLP, the output projection,
    norms and rotary embeddings are recomputed. A TPU's choice between ``FULL`` and the save policies."""

    @classmethod
    def setting(cls) -> str:
        return "remat"


class Attention(Choice):
    """The attention kernel."""

    AUTO = "auto"
    """Splash on a TPU (when the sequence length is a multiple of 128), XLA elsewhere."""
    XLA = "xla"
    """Einsums and a softmax, the scores materialised (any device)."""
    SPLASH = "splash"
    """JAX's Pallas splash attention kernel (TPU; Pallas' interpreter elsewhere, slowly)."""

    @classmethod
    def setting(cls) -> str:
        return "attention"


class Decode(Choice):
    """How a decoder's key/value-cache step reads and writes the cache (``levanter.inference``)."""

    AUTO = "auto"
    """``PALLAS`` on a TPU, ``LIVE`` elsewhere."""
    FULL = "full"
    """Every position a slot holds is read at each step (masked past the row's own), and each row's
    new keys and values are written by XLA's batched update (a scatter: on a TPU a loop over the
    rows). The first decoder, kept for comparisons."""
    LIVE = "live"
    """Only the live prefix is read: the cache cut at the smallest bucket (powers of two from 128,
    and the whole) holding every row's positions, chosen on the device at each step; written as
    ``FULL`` writes."""
    PALLAS = "pallas"
    """``LIVE``'s read; each row's new key and value written in place by a Pallas kernel (the
    8-position tile holding it read, patched and written back, the rows' DMAs overlapped: TPU;
    Pallas' interpreter elsewhere)."""

    @classmethod
    def setting(cls) -> str:
        return "decode"


class DecodeHead(Choice):
    """How a decoder's step makes its tokens from its hidden states when every active row is greedy
    and none asks for alternatives (``levanter.inference.device``; other steps always take ``PLAIN``)."""

    AUTO = "auto"
    """``FUSED`` on a TPU for two slots or more, ``PLAIN`` elsewhere (``levanter.inference.device``)."""
    PLAIN = "plain"
    """XLA writes the float32 logits ``[slots, vocab]`` to HBM; the argmax and the log-sum-exp read them."""
    FUSED = "fused"
    """A Pallas kernel's online argmax and log-sum-exp over vocabulary tiles, the logits never leaving
    vector memory (``levanter.ops.pallas_head.greedy_head``; TPU; Pallas' interpreter elsewhere)."""

    @classmethod
    def setting(cls) -> str:
        return "decode_head"


@dataclasses.dataclass(frozen=True)
class Impl:
    """How a model's forward pass runs (a model config's ``build`` takes it)."""

    remat: Remat = Remat.NONE
    """What each layer keeps for the backward pass (``AUTO`` is resolved before a model is built)."""
    attention: Attention = Attention.AUTO
    """Which attention kernel."""
    scan_layers: bool = True
    """Run the layers as one ``jax.lax.scan`` over stacked weights (compile time independent of
    depth); False unrolls them (the same parameters, for comparisons)."""
    unroll: int = 1
    """Layers per iteration of that scan (``jax.lax.scan``'s ``unroll``; the number of layers unrolls it
    whole over the same stacked weights): how, not what, is computed. More layers per iteration let
    XLA fuse across a layer's boundary and write the saved activations in fewer, larger slices, at
    the cost of compile time."""
    interpret: bool = False
    """Run Pallas kernels in the interpreter (tests on a CPU)."""
    loss: LossImpl = LossImpl.AUTO
    """The loss over the output head: the blockwise scan or the Pallas kernels (``levanter.training.loss``
    reads it from the model)."""

    decode: Decode = Decode.AUTO
    """How a key/value-cache decoder reads and writes its cache."""
    decode_head: DecodeHead = DecodeHead.AUTO
    """How a greedy decoder's step makes its tokens from its hidden states."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "remat", Remat.parse(self.remat))
        object.__setattr__(self, "decode", Decode.parse(self.decode))
        object.__setattr__(self, "decode_head", DecodeHead.parse(self.decode_head))
        object.__setattr__(self, "attention", Attention.parse(self.attention))
        object.__setattr__(self, "loss", LossImpl.parse(self.loss))
        if not isinstance(self.unroll, int) or isinstance(self.unroll, bool) or self.unroll < 1:
            raise ValueError(f"unroll must be an int >= 1 (layers per iteration of the layer scan), got {self.unroll!r}")
        if self.remat is Remat.AUTO:
            raise ValueError("remat='auto' is resolved to a policy before the model is built "
                             "(levanter.memory_estimate.choose_remat)")


UNROLL_LAYERS_UP_TO = 8
"""On a TPU, a stack of at most this many layers runs unrolled (the scan's ``unroll`` is the whole
stack). Measured on a v5e (2026-12-07, ``benchmarks/device_check.sh``): ``llama_150m`` (6 layers)
32 x 1024 took 191.5 ms a step unrolled against 208.6 ms scanned, 8 x 4096 230.5 against 248.0;
``llama_600m`` (24 layers) 646.4 against 594.0; two or three layers an iteration were slower than
one at both sizes (255.6 ms, 629.7 ms)."""


def resolve_unroll(choice: int | None, num_layers: int) -> int:
    """Layers per iteration of the layer scan ``choice`` means on this process's default backend:
    None is the whole stack on a TPU when it has at most :data:`UNROLL_LAYERS_UP_TO` layers, else 1
    (on a CPU or GPU one layer's program compiles fastest, and was never measured slower)."""
    if choice is not None:
        return choice
    import jax  # here, not at the top: importing this module does not import JAX

    return num_layers if jax.default_backend() == "tpu" and num_layers <= UNROLL_LAYERS_UP_TO else 1
