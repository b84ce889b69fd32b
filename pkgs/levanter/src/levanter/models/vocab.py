"""The vocabulary's parameters: the output head as stored, and growing a trained model's vocabulary
(new special tokens for fine-tuning) with old rows intact."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["extend_vocab", "params_vocab_size", "stored_head"]

_EMBED = ("embed", "embeddings")
_HEAD = ("lm_head", "w")


def stored_head(params: Any, tied: bool) -> tuple[Any, bool]:
    """The output head's weights as the Llama parameters ``params`` store them, and whether their rows
    are the vocabulary: with ``tied`` embeddings the table ``[vocab, hidden]``, else ``lm_head``'s
    ``[hidden, vocab]``."""
    if tied:
        return params[_EMBED[0]][_EMBED[1]], True
    return params[_HEAD[0]][_HEAD[1]], False


def params_vocab_size(params: Any) -> int:
    """The number of token ids the Llama parameters ``params`` embed."""
    return int(np.shape(params[_EMBED[0]][_EMBED[1]])[0])


def extend_vocab(params: Any, vocab_size: int) -> Any:
    """``params`` with room for ``vocab_size`` ids: existing embedding rows and output-projection
    columns are kept bit for bit; each new row (column) is the mean of the old ones, so a new token
    starts as an "average" token instead of noise that would dominate the first logits.

    Raises:
        ValueError: ``vocab_size`` is smaller than the model's (ids would be dropped).
    """
    old = params_vocab_size(params)
    if vocab_size < old:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the model's {old}; a vocabulary can "
                         "only grow (the data was tokenized with another tokenizer?)")
    if vocab_size == old:
        return params
    import jax.numpy as jnp

    out = {module: dict(names) for module, names in params.items()}
    embed = out[_EMBED[0]][_EMBED[1]]
    rows = jnp.broadcast_to(jnp.mean(embed, axis=0, keepdims=True), (vocab_size - old, embed.shape[1]))
    out[_EMBED[0]][_EMBED[1]] = jnp.concatenate([embed, rows.astype(embed.dtype)], axis=0)
    if _HEAD[0] in out:
        head = out[_HEAD[0]][_HEAD[1]]
        cols = jnp.broadcast_to(jnp.mean(head, axis=1, keepdims=True), (head.shape[0], vocab_size - old))
        out[_HEAD[0]][_HEAD[1]] = jnp.concatenate([head, cols.astype(head.dtype)], axis=1)
    return out
