"""How much device memory a training step needs, from the shapes alone (no compilation): the trainer
chooses ``remat="auto"`` by it, ``device_check`` refuses a configuration that does not fit by it,
and ``memory.json`` records it beside XLA's own numbers.

The terms, per device, in bytes: float32 parameters and their gradients; the optimizer's moments
(none on the device when offloaded to host memory, but the largest array's while it is updated);
what each layer keeps for the backward pass under the remat policy, for every layer, plus one
layer's working set while it is recomputed; the attention scores where the XLA kernel
materialises them; and the loss: the output softmax's blocks (none with the Pallas kernels) and
the float32 gradient of the hidden states it keeps from its forward pass for its backward. It is an estimate: XLA's buffer assignment
may reuse or add; a margin (:data:`HEADROOM`) stands for what it adds. Importing this module does
not import JAX.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from levanter.models.impl import Attention, LossImpl, Remat
from levanter.ops.blocks import default_block

__all__ = ["HEADROOM", "MemoryEstimate", "choose_remat", "estimate_memory"]

HEADROOM = 1.10
"""An estimate fits when ``HEADROOM`` times it is within the device's memory."""

_AUTO_ORDER = (Remat.NONE, Remat.SAVE_DOTS, Remat.SAVE_ATTENTION, Remat.FULL)
"""What ``remat="auto"`` tries, least recomputation first. ``OFFLOAD`` is not among them: on the TPU
v5e (2026-12-06) llama_600m 16x1024 took 1,038 ms a step with it against 636 ms with ``FULL`` (its
3 GiB of activations cross the host link both ways each step); it is there to be asked for, and
:func:`choose_remat` weighs it when a caller's ``candidates`` name it."""


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device needs for a training step, by kind."""

    params: int
    grads: int
    opt_state: int
    activations: int
    attention: int
    loss: int
    remat: str
    """The policy estimated."""
    host: int = 0
    """Bytes in the host's memory, not the device's (not in :attr:`total`): offloaded activations and
    optimizer moments."""

    @property
    def total(self) -> int:
        return self.params + self.grads + self.opt_state + self.activations + self.attention + self.loss

    def fits(self, available: int, host_available: int | None = None) -> bool:
        """Whether the step fits in ``available`` bytes of device memory with :data:`HEADROOM`, and
        its :attr:`host` bytes in ``host_available`` (None: not checked) with the same margin."""
        return self.total * HEADROOM <= available and self.host_fits(host_available)

    def host_fits(self, host_available: int | None) -> bool:
        """Whether :attr:`host` fits in ``host_available`` bytes with :data:`HEADROOM` (None: not checked)."""
        return host_available is None or self.host * HEADROOM <= host_available

    def describe(self) -> str:
        """``12.3 GiB (params 2.2, grads 2.2, optimizer 4.5, activations 3.1, attention 0.0, loss 0.3 GiB)``."""
        def gib(n: int) -> str:
            return f"{n / 2**30:.1f}"
        return (f"{gib(self.total)} GiB (params {gib(self.params)}, grads {gib(self.grads)}, optimizer "
                f"{gib(self.opt_state)}, activations {gib(self.activations)}, attention {gib(self.attention)}, "
                f"loss {gib(self.loss)} GiB; remat={self.remat})"
                + (f" + {gib(self.host)} GiB on the host" if self.host else ""))

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total": self.total}


def _kept_per_token(model: Any, remat: Remat) -> tuple[float, float]:
    """(values one layer keeps per token for the backward pass, values of its working set per token)."""
    d, inter = model.hidden_dim, model.intermediate_dim
    kv = model.num_kv_heads * model.head_dim
    # Everything a layer makes: norms (float32 inside: counted twice), q, k, v before and after
    # rotary, attention output, o, the residual, gate, up, silu(gate) (and its float32 parts),
    # their product, down. Calibrated against XLA's TPU v5e buffer assignment (benchmarks/tpu_compile:
    # llama_150m 32 x 1024: 9.9 GiB of temporaries without remat, 5.1 GiB with save_dots).
    whole = 16 * d + 4 * kv + 6 * inter
    kept = {Remat.NONE: whole,
            Remat.SAVE_DOTS: d + (d + 2 * kv) + d + 2 * inter + d,
            Remat.SAVE_ATTENTION: d + (d + 2 * kv) + 2 * d,
            Remat.FULL: d,
            Remat.OFFLOAD: d}[remat]
    return kept, whole


def _offloaded_per_token(model: Any, remat: Remat) -> int:
    """Values one layer puts in host memory per token: ``OFFLOAD``'s are ``SAVE_ATTENTION``'s but the
    layer's input (q, k, v, the attention output, o)."""
    d, kv = model.hidden_dim, model.num_kv_heads * model.head_dim
    return (d + 2 * kv) + 2 * d if remat is Remat.OFFLOAD else 0


def _moment_bytes(optimizer: Any, params: int, largest: int, offload: bool) -> tuple[int, int]:
    """(device bytes, host bytes) of Adam's two moments: all on the device, or when offloaded all on
    the host and the largest parameter's on the device while it is updated."""
    each = 2 if getattr(optimizer, "moment_dtype", "float32") == "bfloat16" else 4
    second = 0.05 if getattr(optimizer, "factored_second_moment", False) else 1.0
    per_param = each * (1.0 + second)
    return (int(per_param * largest), int(per_param * params)) if offload else (int(per_param * params), 0)


def estimate_memory(model: Any, *, batch: int, seq_len: int, compute_bytes: int, remat: Remat | str,
                    attention: Attention | str, optimizer: Any = None, offload_optimizer: bool = False,
                    loss_block: int | None = None, shards: int = 1, batch_shards: int = 1,
                    grad_bytes: int = 4, loss_impl: LossImpl | str = LossImpl.BLOCKWISE) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of a training step of Llama-shaped ``model`` (a ``LlamaConfig``).

    Args:
        batch: sequences per (micro-)batch, over all devices.
        seq_len: tokens per sequence.
        compute_bytes: bytes of the compute dtype (2 for bfloat16, 4 for float32).
        remat: the policy (``AUTO`` is not a policy: see :func:`choose_remat`).
        attention: ``SPLASH`` keeps no scores; ``XLA`` (and ``AUTO``, when not resolved) materialises them.
        optimizer: an ``AdamConfig`` (its moment dtype and factoring), None: float32 Adam.
        loss_block: the output softmax's positions per block (None: the default).
        shards: devices the parameters and optimizer state are split over (fsdp x tensor).
        batch_shards: devices the batch is split over (data x fsdp).
        grad_bytes: bytes of a gradient (2 with ``grad_dtype="bfloat16"``).
        loss_impl: ``PALLAS`` holds no logits (``AUTO``, when not resolved, counts the blockwise scan's).
    """
    remat, attention = Remat.parse(remat), Attention.parse(attention)
    if remat is Remat.AUTO:
        raise ValueError("estimate a policy, not remat='auto' (choose_remat tries them)")
    params = model.num_params()
    layer_params = params - model.vocab_size * model.hidden_dim * (1 if model.tie_embeddings else 2)
    largest = model.vocab_size * model.hidden_dim
    tokens = math.ceil(batch / batch_shards) * seq_len
    kept, whole = _kept_per_token(model, remat)
    activations = tokens * compute_bytes * (kept * model.num_layers + whole)
    offloaded = tokens * compute_bytes * _offloaded_per_token(model, remat) * model.num_layers
    # The layers' weights cast to the compute dtype: XLA hoists the cast out of the layer loop (and
    # without remat the backward pass needs them anyway).
    activations += compute_bytes * layer_params // shards
    rows = math.ceil(batch / batch_shards)
    heads = model.num_heads
    if attention is Attention.SPLASH:
        scores = 0
    else:
        # float32 scores and their softmax, bfloat16 probabilities kept for the backward pass.
        per_layer = rows * heads * seq_len * seq_len
        scores = per_layer * (8 + compute_bytes) + (per_layer * compute_bytes * model.num_layers
                                                    if remat is Remat.NONE else 0)
    # Either way the loss keeps the float32 gradient of its hidden states, one value per token and
    # hidden unit, from its forward pass (where it is made beside the loss) to its backward pass.
    hidden_grad = rows * seq_len * model.hidden_dim * 4
    if LossImpl.parse(loss_impl) is LossImpl.PALLAS:
        # The kernels' float32 gradient of the head, the head's rounded copy; the embedding table and
        # the head cast to the compute dtype.
        loss = hidden_grad + (4 + 3 * compute_bytes) * largest // shards
    else:
        block = default_block(rows, seq_len, model.vocab_size) if loss_block is None else min(loss_block, seq_len)
        # The block's float32 logits, probabilities and their gradient; the head's gradient accumulated;
        # the embedding table and the head cast to the compute dtype.
        loss = (hidden_grad + rows * block * model.vocab_size * (8 + compute_bytes)
                + (4 + 2 * compute_bytes) * largest // shards)
    moments, host_moments = _moment_bytes(optimizer, params // shards, largest // shards, offload_optimizer)
    return MemoryEstimate(params=4 * params // shards, grads=grad_bytes * params // shards, opt_state=moments,
                          activations=activations, attention=scores, loss=loss, remat=remat.value,
                          host=offloaded + host_moments)


def choose_remat(model: Any, available: int, *, host_available: int | None = None,
                 candidates: Sequence[Remat] = _AUTO_ORDER, **kwargs: Any) -> tuple[Remat, MemoryEstimate]:
    """The first of ``candidates`` (least recomputation first) whose estimate fits ``available``
    bytes of device memory, with its estimate; when none fits, the one needing the least device
    memory (of equals, the first: ``OFFLOAD`` holds what ``FULL`` does and recomputes less).

    ``OFFLOAD`` (never among ``remat="auto"``'s candidates) is tried only with ``host_available``, the
    host memory the step may use, and taken only when its host bytes fit there too.
    """
    candidates = [r for r in candidates if r is not Remat.OFFLOAD or host_available is not None]
    if not candidates:
        raise ValueError("choose_remat: no candidate policy left (OFFLOAD needs host_available)")
    tried = []
    for remat in candidates:
        estimate = estimate_memory(model, remat=remat, **kwargs)
        if estimate.fits(available, host_available):
            return remat, estimate
        tried.append((remat, estimate))
    on_host = [(r, e) for r, e in tried if e.host_fits(host_available)]
    return min(on_host or tried[-1:], key=lambda pair: pair[1].total)
