"""How much device memory a training step needs, from the shapes alone (no compilation): the trainer
chooses ``remat="auto"`` by it, ``device_check`` refuses a configuration that does not fit by it,
and ``memory.json`` records it beside XLA's own numbers.

The step's peak, per device, in bytes, is the largest of three moments of the step (XLA's buffer
assignment for a TPU v5e, compiled on a CPU, 2026-12-06: ``benchmarks/tpu_compile.py``): all
hold the float32 parameters and the optimizer's moments on the device (the largest array's alone
while it is updated, when they live in host memory); **the loss**, after the layers' forward, holds
the layers' weights cast to the compute dtype, what each layer kept for its backward under the remat
policy, and the loss's own: one float32 block of logits, the head's float32 gradient accumulated,
the head cast, the float32 gradient of the hidden states; **the layers' backward** holds the cast
weights, the kept activations, the head's float32 gradient, the layers' gradients (stacked, whole
from its start) and one layer's working set (and the XLA kernel's attention scores); **the update**
holds every gradient. The head's and the embedding's gradients exist only from the loss on and
after the layers' backward, so they are not counted beside the layers' working set. It is an
estimate: a margin (:data:`HEADROOM`) stands for what XLA's buffer assignment may add. Importing
this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from levanter.models.impl import Attention, LossImpl, Remat
from levanter.ops.blocks import STAGE_LOGITS, default_block
from levanter.ops.splash_tiles import LANES

__all__ = ["HEADROOM", "MemoryEstimate", "choose_remat", "estimate_memory", "step_phases"]

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
    phase: str = "backward"
    """The moment of the step the peak is at: ``loss``, ``backward`` (the layers') or ``update``."""

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
                f"loss {gib(self.loss)} GiB; remat={self.remat}, peak at the {self.phase})"
                + (f" + {gib(self.host)} GiB on the host" if self.host else ""))

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total": self.total}


def _head_padding(model: Any) -> int:
    """How many times its width a head takes in a TPU's memory: heads narrower than the 128 vector
    lanes are padded to them."""
    return max(LANES // model.head_dim, 1)


def _attention_kept(model: Any, attention: Attention) -> float:
    """Values per token of what attention's backward reads, kept by ``SAVE_ATTENTION`` and ``OFFLOAD``
    (``levanter.ops.attention.SAVED``): the splash kernel's output as it lays it out (heads narrower
    than the TPU's 128 lanes padded to them) and its float32 log-sum-exp per head (two values of a
    16-bit dtype); the XLA path's output."""
    d = model.hidden_dim
    if attention is Attention.SPLASH:
        return d * _head_padding(model) + 2 * model.num_heads
    return d


def _kept_per_token(model: Any, remat: Remat, attention: Attention) -> tuple[float, float]:
    """(values one layer keeps per token for the backward pass, values of one layer's working set per
    token in the backward pass)."""
    d, inter = model.hidden_dim, model.intermediate_dim
    kv = model.num_kv_heads * model.head_dim
    # Everything a layer makes: norms (float32 inside: counted twice), q, k, v before and after
    # rotary, attention output, o, the residual, gate, up, silu(gate) (and its float32 parts),
    # their product, down (XLA's TPU v5e buffer assignment, llama_150m 32 x 1024 without remat:
    # 6 x intermediate and 16 x hidden kept a token, heads of 64 padded to 128 lanes).
    whole = 16 * d + 4 * kv + 6 * inter
    kept = {Remat.NONE: whole,
            Remat.SAVE_DOTS: d + (d + 2 * kv) + d + 2 * inter + d,
            Remat.SAVE_ATTENTION: d + (d + 2 * kv) + _attention_kept(model, attention),
            Remat.FULL: d,
            Remat.OFFLOAD: d}[remat]
    # One layer's backward: gate, up and their product recomputed or read, and the hidden-sized
    # values and gradients around attention (llama_1_4b 8 x 2048, full remat: 1.36 GiB; 150m 32 x
    # 1024 without remat: 0.83 GiB). Heads narrower than the TPU's 128 lanes are padded to them:
    # q, k, v and their gradients take that much more.
    padded = 2 * (d + 2 * kv) * (_head_padding(model) - 1)
    return kept, 3 * inter + 16 * d + padded


def _offloaded_per_token(model: Any, remat: Remat, attention: Attention) -> float:
    """Values one layer puts in host memory per token: ``OFFLOAD``'s are ``SAVE_ATTENTION``'s but the
    layer's input (q, k, v and what attention's backward reads)."""
    d, kv = model.hidden_dim, model.num_kv_heads * model.head_dim
    return (d + 2 * kv) + _attention_kept(model, attention) if remat is Remat.OFFLOAD else 0


def _moment_bytes(model: Any, optimizer: Any, shards: int, offload: bool) -> tuple[int, int]:
    """(device bytes, host bytes) of Adam's two moments: all on the device, or when offloaded all on
    the host and the largest parameter's on the device while it is updated. A factored second moment
    keeps a float32 row and column per matrix (``levanter.optim.moments``), the vectors' whole."""
    each = 2 if getattr(optimizer, "moment_dtype", "float32") == "bfloat16" else 4
    params, largest = model.num_params(), model.vocab_size * model.hidden_dim
    second, second_largest = each * params, each * largest
    if getattr(optimizer, "factored_second_moment", False):
        matrices = [(shape, model.num_layers) for name, shape in model.linear_shapes().items() if name != "lm_head"]
        matrices += [((model.vocab_size, model.hidden_dim), 2 - model.tie_embeddings)]
        in_matrices = sum(r * c * n for (r, c), n in matrices)
        second = 4 * sum((r + c) * n for (r, c), n in matrices) + each * (params - in_matrices)
        second_largest = 4 * (model.vocab_size + model.hidden_dim)
    device, host = (each * largest + second_largest) // shards, (each * params + second) // shards
    return (device, host) if offload else (host, 0)


def estimate_memory(model: Any, **kwargs: Any) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of a training step of Llama-shaped ``model`` (a ``LlamaConfig``): its
    peak, the largest of :func:`step_phases` (the arguments are theirs)."""
    return max(step_phases(model, **kwargs), key=lambda e: e.total)


def step_phases(model: Any, *, batch: int, seq_len: int, compute_bytes: int, remat: Remat | str,
                attention: Attention | str, optimizer: Any = None, offload_optimizer: bool = False,
                loss_block: int | None = None, shards: int = 1, batch_shards: int = 1,
                grad_bytes: int = 4, loss_impl: LossImpl | str = LossImpl.BLOCKWISE) -> list[MemoryEstimate]:
    """What a training step of Llama-shaped ``model`` (a ``LlamaConfig``) holds at the loss, the layers'
    backward and the update (the module's docstring), one :class:`MemoryEstimate` each.

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
        loss_impl: ``PALLAS`` stages one chunk of logits (``AUTO``, when not resolved, counts the blockwise scan's).
    """
    remat, attention = Remat.parse(remat), Attention.parse(attention)
    if remat is Remat.AUTO:
        raise ValueError("estimate a policy, not remat='auto' (choose_remat tries them)")
    params = model.num_params()
    largest = model.vocab_size * model.hidden_dim
    layer_params = params - largest * (1 if model.tie_embeddings else 2)
    rows = math.ceil(batch / batch_shards)
    tokens = rows * seq_len
    kept, work = _kept_per_token(model, remat, attention)
    # The layers' weights cast to the compute dtype (XLA hoists the cast out of the layer loop) and
    # what every layer keeps for the backward pass.
    held = compute_bytes * layer_params // shards + tokens * compute_bytes * kept * model.num_layers
    offloaded = tokens * compute_bytes * _offloaded_per_token(model, remat, attention) * model.num_layers
    scores = 0
    if attention is not Attention.SPLASH:
        # float32 scores and their softmax, bfloat16 probabilities kept for the backward pass.
        per_layer = rows * model.num_heads * seq_len * seq_len
        scores = per_layer * (8 + compute_bytes) + (per_layer * compute_bytes * model.num_layers
                                                    if remat is Remat.NONE else 0)
    # The head's float32 gradient, from the loss to the update; the float32 gradient of the hidden states.
    head_grad, hidden_grad = 4 * largest // shards, tokens * model.hidden_dim * 4
    if LossImpl.parse(loss_impl) is LossImpl.PALLAS:
        # The kernels' rounded copy of the head, the head and embedding cast to the compute dtype,
        # and a chunk of float32 logits staged (levanter.ops.pallas_staged).
        staged = 4 * min(STAGE_LOGITS, tokens * model.vocab_size)
        loss = head_grad + hidden_grad + 3 * compute_bytes * largest // shards + staged
    else:
        block = default_block(rows, seq_len, model.vocab_size) if loss_block is None else min(loss_block, seq_len)
        # One block's float32 logits (XLA fuses their softmax and its gradient into them) and the head cast.
        loss = head_grad + hidden_grad + rows * block * model.vocab_size * 4 + compute_bytes * largest // shards
    moments, host_moments = _moment_bytes(model, optimizer, shards, offload_optimizer)
    common = dict(params=4 * params // shards, opt_state=moments, remat=remat.value, host=offloaded + host_moments)
    return [
        MemoryEstimate(grads=0, activations=held, attention=0, loss=loss, phase="loss", **common),
        MemoryEstimate(grads=grad_bytes * layer_params // shards, activations=held + tokens * compute_bytes * work,
                       attention=scores, loss=head_grad, phase="backward", **common),
        MemoryEstimate(grads=grad_bytes * params // shards, activations=0, attention=0, loss=head_grad,
                       phase="update", **common),
    ]


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
