"""A Llama-style decoder: its config here (no JAX import), the Haiku model in ``_llama_haiku``.

RMSNorm, rotary embeddings, SwiGLU, grouped-query causal attention. Importing this module stays
cheap so experiment files and the planner can name a model without loading JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LlamaConfig", "llama_forward", "transformed_llama"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama decoder.

    ``vocab_size`` is a default only: the trainer replaces it with the vocabulary size recorded by
    the tokenized data (``index.json``) so one preset serves any tokenizer.
    """

    vocab_size: int = 4096
    """Number of token ids (replaced by the data's vocabulary size at training time)."""
    hidden_dim: int = 32
    """Width of the residual stream."""
    intermediate_dim: int = 128
    """Width of the SwiGLU hidden layer."""
    num_heads: int = 2
    """Number of query heads; ``hidden_dim`` must be divisible by it."""
    num_kv_heads: int = 2
    """Number of key/value heads (grouped-query attention); must divide ``num_heads``."""
    num_layers: int = 2
    """Number of transformer blocks."""
    max_seq_len: int = 512
    """Longest context the model is meant for (RoPE has no table, so the trainer may extend it)."""
    rope_theta: float = 10000.0
    """Base of the rotary embedding frequencies."""
    norm_eps: float = 1e-5
    """Epsilon inside RMSNorm."""
    tie_embeddings: bool = False
    """Use the input embedding matrix as the output projection."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_dim", "intermediate_dim", "num_heads", "num_kv_heads",
                     "num_layers", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim must be divisible by num_heads, got hidden_dim={self.hidden_dim} "
                f"and num_heads={self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads must be divisible by num_kv_heads, got num_heads={self.num_heads} "
                f"and num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim (hidden_dim / num_heads) must be even for RoPE, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_dim // self.num_heads

    def num_params(self) -> int:
        """Exact number of parameters of the model this config describes."""
        d, kv = self.hidden_dim, self.num_kv_heads * self.head_dim
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * self.intermediate_dim + 2 * d
        head = 0 if self.tie_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * per_layer + d + head

    def flops_per_token(self, seq_len: int, *, causal: bool = False) -> float:
        """Model FLOPs of training (forward and backward) per token at context ``seq_len``.

        The convention MFU is quoted in (PaLM's appendix B; Chinchilla's and Marin's 6N): each
        matmul weight costs 2 FLOPs forward and 4 backward, so 6 per weight, counting every
        projection and the output head but not the embedding lookup, nor norms, activations or the
        softmax. Attention adds its two products per layer (scores ``q k^T`` and ``p v``): 2 * 2 *
        seq_len * hidden forward per token, 12 * layers * hidden * seq_len with the backward, with
        no discount for the causal mask (this project's count until now, and ``causal=False``).
        With ``causal`` the attention term is halved: a token attends to the ones before it, about
        half the context on average (MaxText's count since its PR #1988; PaLM's 6N + 12LHQT does
        not halve). Goals are stated in the causal count; both are reported.
        """
        d, kv = self.hidden_dim, self.num_kv_heads * self.head_dim
        matmul = self.num_layers * (2 * d * d + 2 * d * kv + 3 * d * self.intermediate_dim)
        matmul += d * self.vocab_size
        return 6.0 * matmul + (6.0 if causal else 12.0) * self.num_layers * d * seq_len

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """``(in, out)`` of each linear module, by name (what ``LoraConfig.targets`` may name)."""
        d, kv, inner = self.hidden_dim, self.num_kv_heads * self.head_dim, self.intermediate_dim
        shapes = {"q_proj": (d, d), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (d, d),
                  "gate_proj": (d, inner), "up_proj": (d, inner), "down_proj": (inner, d)}
        if not self.tie_embeddings:
            shapes["lm_head"] = (d, self.vocab_size)
        return shapes

    def sharding_units(self) -> Mapping[str, int]:
        """Whole heads per logical axis: a mesh splits ``heads`` and ``kv_heads`` only between heads."""
        return {"heads": self.num_heads, "kv_heads": self.num_kv_heads}

    def build(self, compute_dtype: Any = None, shard: Callable[..., Any] | None = None, impl: Any = None) -> Any:
        """This Llama (:func:`transformed_llama`); ``impl`` (a ``levanter.models.impl.Impl``) says how it runs."""
        return transformed_llama(self, compute_dtype, shard, impl)


def llama_forward(config: LlamaConfig, tokens: Any, compute_dtype: Any = None, shard: Any = None) -> Any:
    """Logits of the Llama for ``tokens`` (inside ``hk.transform``); see ``_llama_haiku``."""
    from levanter.models import _llama_haiku

    dtype = _llama_haiku.jnp.float32 if compute_dtype is None else compute_dtype
    return _llama_haiku.llama_forward(config, tokens, dtype, shard)


def transformed_llama(config: LlamaConfig, compute_dtype: Any = None, shard: Any = None, impl: Any = None) -> Any:
    """The Llama (``_llama_haiku.LlamaModel``): ``init``/``apply`` as a Haiku transform's, plus ``hidden``
    and ``head`` for the blockwise loss; ``shard`` places activations on a mesh, ``impl`` says how it runs."""
    from levanter.models import _llama_haiku
    from levanter.models.impl import Impl

    dtype = _llama_haiku.jnp.float32 if compute_dtype is None else compute_dtype
    return _llama_haiku.transformed_llama(config, dtype, shard, Impl() if impl is None else impl)
