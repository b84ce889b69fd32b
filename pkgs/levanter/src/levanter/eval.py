"""Evaluating a trained model on tokenized text: loss, perplexity and bits per byte.

The text is cut into windows as the trainer's validation does (documents in order, each followed
by the end-of-document token, in non-overlapping windows of ``seq_len + 1`` tokens; chat data one
record of packed conversations per window) and scored with the trainer's own loss: on chat data
over the targets the loss mask counts (the assistant's tokens), as fine-tuning minimises it. Bits
per byte divide the summed loss (converted to bits) by the number of UTF-8 bytes the scored tokens
stand for, so models with different tokenizers can be compared on the same text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any

import numpy as np

from levanter.models.llama import LlamaConfig
from rigging import filesystem as fs

__all__ = ["EvalResult", "evaluate_split", "read_tokenizer_json", "token_byte_lengths", "vocabulary_extends"]


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Scores of one model on one body of text."""

    loss: float
    """Mean next-token cross entropy, nats per token."""
    perplexity: float
    """``exp(loss)``."""
    bits_per_byte: float
    """Total loss in bits over the UTF-8 bytes the predicted tokens stand for."""
    tokens: int
    """Predicted tokens scored (end-of-document tokens included; on chat data the mask-on ones)."""
    bytes: int
    """UTF-8 bytes those tokens stand for (end-of-document and other special tokens count 0)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def token_byte_lengths(tokenizer_json: str) -> np.ndarray:
    """For every token id of a Hugging Face ``tokenizer.json`` (its text), the UTF-8 bytes it decodes to.

    Byte-level BPE tokens are strings over a 256-character alphabet, one character a byte, so
    their length is exact; other tokenizers' tokens are decoded one at a time. Special tokens
    (such as the end-of-document token) stand for no text and count 0.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    decoder = (json.loads(tokenizer_json).get("decoder") or {}).get("type")
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    lengths = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if token in special or token_id >= len(lengths):
            continue
        if decoder == "ByteLevel":
            lengths[token_id] = len(token)
        else:
            lengths[token_id] = len(tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8"))
    return lengths


def vocabulary_extends(base_json: str, extended_json: str) -> bool:
    """Whether the tokenizer ``extended_json`` (a ``tokenizer.json``'s text) keeps every token of
    ``base_json`` at its id, adding only new ids after them (a chat template's special tokens)."""
    from tokenizers import Tokenizer

    base = Tokenizer.from_str(base_json).get_vocab(with_added_tokens=True)
    extended = Tokenizer.from_str(extended_json).get_vocab(with_added_tokens=True)
    return all(extended.get(token) == token_id for token, token_id in base.items()) \
        and all(token_id >= len(base) for token, token_id in extended.items() if token not in base)


@functools.cache
def _mean_loss(model_config: LlamaConfig) -> Any:
    """The jitted mean loss of ``model_config``'s model on a batch, its targets weighted (``[b, seq_len]``):
    one function a model, and every batch of one shape (a short last batch padded with rows of weight
    0), so an eval of several datasets traces and compiles it once, not once per dataset or batch."""
    # JAX and the model load here, when something is scored: this module's tokenizer helpers
    # (token_byte_lengths, vocabulary_extends, read_tokenizer_json) need neither. The loss comes
    # from where it lives, not levanter.trainer: an eval step need not import the trainer's set-up
    # (metrics writers, checkpoint managers), about 0.7 s of every eval step's start.
    import jax
    import jax.numpy as jnp

    from levanter.models.llama import transformed_llama
    from levanter.training.loss import loss_fn

    model = transformed_llama(model_config, jnp.float32)
    return jax.jit(lambda p, b, w: loss_fn(model, p, b, jnp.float32, weights=w))


def evaluate_split(model_config: LlamaConfig, params: Any, dataset_path: str, split: str, *, seq_len: int,
                   batch_size: int, byte_lengths: np.ndarray, max_tokens: int | None = None,
                   cache_dir: str | None = None) -> EvalResult:
    """Score ``params`` on ``split`` of the tokenized dataset at ``dataset_path``.

    Args:
        model_config: the model's shape; its vocabulary may be larger than the data's (a model
            fine-tuned with new special tokens, scored on text tokenized before they were added).
        params: the model's parameters (a Haiku params tree).
        dataset_path: a ``marin.tokenized/v1`` folder.
        split: which split to read (``validation`` for held-out data).
        seq_len: context of each window (the training context is the natural choice).
        batch_size: windows scored at once.
        byte_lengths: :func:`token_byte_lengths` of the tokenizer that made the data.
        max_tokens: score at most about this many tokens (whole windows; None: the whole split).
        cache_dir: where remote shards are copied before reading.

    Raises:
        ValueError: the data's vocabulary is larger than the model's, or the split cannot fill
            one window.
    """
    import jax.numpy as jnp

    from levanter.data.chat import ROW_IDS, loss_weights
    from levanter.data.loader import split_windows
    from levanter.data.tokenized import open_split

    data = open_split(dataset_path, split, cache_dir)
    if data.vocab_size > model_config.vocab_size:
        raise ValueError(f"{dataset_path}: tokenized with a {data.vocab_size}-token vocabulary, but the model "
                         f"has {model_config.vocab_size}; evaluate text tokenized with the model's tokenizer")
    if len(byte_lengths) < data.vocab_size:
        raise ValueError(f"byte_lengths covers {len(byte_lengths)} ids, the data's vocabulary has {data.vocab_size}")
    if batch_size <= 0 or seq_len <= 0:
        raise ValueError(f"batch_size and seq_len must be > 0, got {batch_size} and {seq_len}")
    max_windows = None if max_tokens is None else max(1, max_tokens // seq_len)
    mean_loss = _mean_loss(model_config)
    windows = iter(split_windows(data, seq_len + 1, data.is_chat, seed=0, shuffle=False, repeat=False))
    total_nats, total_tokens, total_bytes, taken = 0.0, 0, 0, 0
    while max_windows is None or taken < max_windows:
        want = batch_size if max_windows is None else min(batch_size, max_windows - taken)
        batch = [w for _, w in zip(range(want), windows, strict=False)]
        if not batch:
            break
        taken += len(batch)
        # A short last batch is padded to the batch size with rows that count 0: every batch is one
        # shape, so one compiled program scores them all.
        stacked = np.stack(batch + [np.zeros_like(batch[0])] * (batch_size - len(batch)))
        if data.is_chat:
            targets, weights = stacked[:, ROW_IDS, 1:], loss_weights(stacked).astype(np.int64)
        else:
            targets = stacked[:, 1:]
            weights = np.ones_like(targets, dtype=np.int64)
        weights[len(batch):] = 0
        counted = int(weights.sum())
        # The loss is a mean over the batch's counted targets; weighting by their count makes it a sum.
        total_nats += float(mean_loss(params, jnp.asarray(stacked), jnp.asarray(weights, jnp.float32))) * counted
        total_tokens += counted
        total_bytes += int((byte_lengths[targets] * weights).sum())
    if total_tokens == 0:
        raise ValueError(f"{dataset_path}: split {split!r} holds fewer than {seq_len + 1} tokens, "
                         "not one window; lower seq_len or add text")
    loss = total_nats / total_tokens
    bits_per_byte = total_nats / math.log(2) / total_bytes if total_bytes else math.inf
    return EvalResult(loss=loss, perplexity=math.exp(loss), bits_per_byte=bits_per_byte, tokens=total_tokens,
                      bytes=total_bytes)


def read_tokenizer_json(folder: str) -> str:
    """The text of ``<folder>/tokenizer.json``; raises FileNotFoundError naming it when absent."""
    path = fs.join(folder, "tokenizer.json")
    if not fs.exists(path):
        raise FileNotFoundError(f"{path} not found: no tokenizer beside the model or data in {folder}")
    return fs.read_text(path)
