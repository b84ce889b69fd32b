"""What a request asks of the decoder (:class:`SamplingParams`), and the device function that picks
each row's next token from its logits (greedy, temperature, top-k, top-p) with a key of its own."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

__all__ = ["MAX_STOP_IDS", "SamplingParams", "derived_seed", "sample_tokens", "token_key", "top_logprobs"]

MAX_STOP_IDS = 16
"""Most stop token ids one request may give (the device keeps them in a fixed-size row)."""


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How one request's completion is drawn. Every field changes the tokens, so a step that
    generates hashes them all."""

    max_tokens: int = 16
    """Most new tokens (the completion ends earlier at a stop token or string)."""
    temperature: float = 0.0
    """0 is greedy (the most likely token, no randomness); otherwise tokens are drawn from
    ``softmax(logits / temperature)`` after top-k and top-p."""
    top_k: int = 0
    """Draw only among the ``top_k`` most likely tokens (0: no limit)."""
    top_p: float = 1.0
    """Draw only among the most likely tokens whose probabilities (after temperature and top-k) sum
    to at least ``top_p`` (1.0: no limit; the most likely token is always kept)."""
    seed: int = 0
    """The request's own random stream: the same seed gives the same tokens, whatever else is in the
    batch."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the completion (kept as its last token)."""
    stop: tuple[str, ...] = ()
    """Strings that end the completion (left out of its text); need a tokenizer to decode with."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an int in [0, 2**32), got {self.seed!r}")
        if len(self.stop_token_ids) > MAX_STOP_IDS:
            raise ValueError(f"at most {MAX_STOP_IDS} stop_token_ids, got {len(self.stop_token_ids)}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")

    @property
    def greedy(self) -> bool:
        """Whether no randomness is involved."""
        return self.temperature == 0


def derived_seed(*parts: Any) -> int:
    """A uint32 seed made from ``parts`` (their text joined by ``:``, the first four bytes of its
    SHA-256, little-endian): one request's own seed from what names it, the same in every process."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def token_key(seed: Any, index: Any) -> Any:
    """The key that draws a request's ``index``-th new token: its seed's stream, folded with the
    token's index, so a request's tokens never depend on the rows beside it."""
    import jax

    return jax.random.fold_in(jax.random.PRNGKey(seed), index)


def sample_tokens(logits: Any, temperature: Any, top_k: Any, top_p: Any, keys: Any) -> Any:
    """The next token of each row of float32 ``logits [b, vocab]``: the argmax where ``temperature``
    is 0, else a draw with ``keys [b, 2]`` from ``softmax(logits / temperature)`` restricted to the
    row's ``top_k`` (0: all) most likely tokens and then to its ``top_p`` nucleus. The sort that
    top-k and top-p need is skipped when no row asks for either, and the draw when every row is greedy."""
    import jax
    import jax.numpy as jnp

    def filtered(x: Any) -> Any:
        order = jnp.argsort(-x, axis=-1, stable=True)
        ranked = jnp.take_along_axis(x, order, axis=-1)
        rank = jnp.arange(x.shape[-1])[None, :]
        keep = (top_k[:, None] <= 0) | (rank < top_k[:, None])
        probs = jax.nn.softmax(jnp.where(keep, ranked, -jnp.inf), axis=-1)
        keep = keep & ((jnp.cumsum(probs, axis=-1) - probs) < top_p[:, None])
        drawn = jax.vmap(jax.random.categorical)(keys, jnp.where(keep, ranked, -jnp.inf))
        return jnp.take_along_axis(order, drawn[:, None], axis=-1)[:, 0]

    def plain(x: Any) -> Any:
        return jax.vmap(jax.random.categorical)(keys, x)

    def draw(x: Any) -> Any:
        # Scaled here, not before the cond: a batch of greedy rows then writes no scaled copy of
        # its logits ([batch, vocab] float32 each step).
        scaled = x / jnp.where(temperature > 0, temperature, 1.0)[:, None]
        return jax.lax.cond(jnp.any((top_k > 0) | (top_p < 1.0)), filtered, plain, scaled)

    def none(x: Any) -> Any:
        return jnp.zeros(x.shape[:1], jnp.int32)

    # A batch of greedy rows draws nothing: the draw (a Gumbel number per row and vocabulary entry,
    # made a llama_nano-size decode step at batch 64 on a CPU 2.6x slower).
    drawn = jax.lax.cond(jnp.any(temperature > 0), draw, none, logits)
    return jnp.where(temperature > 0, drawn, jnp.argmax(logits, axis=-1)).astype(jnp.int32)


def top_logprobs(logprobs: Any, wanted: Any, n: int) -> tuple[Any, Any]:
    """The ``n`` (static) most likely tokens of each row of ``logprobs [b, vocab]``: their ids and
    values, ``[b, n]`` each (given logits, their logits: the same tokens, each row's values less its
    log-sum-exp are the log-probabilities), likeliest first (of equal ones, the lower id first). Computed
    only when a row of ``wanted [b]`` asks; zeros otherwise, so a batch where no request wants the
    alternatives skips the selection (a pass over the whole vocabulary per row)."""
    import jax
    import jax.numpy as jnp

    def none(x: Any) -> tuple[Any, Any]:
        return jnp.zeros((x.shape[0], n), jnp.int32), jnp.zeros((x.shape[0], n), x.dtype)

    def top(x: Any) -> tuple[Any, Any]:
        values, ids = jax.lax.top_k(x, n)
        return ids.astype(jnp.int32), values

    if n == 0:
        return none(logprobs)
    return jax.lax.cond(jnp.any(wanted), top, none, logprobs)
