"""Train a byte-level BPE tokenizer with Hugging Face ``tokenizers`` on a text corpus.

Byte-level means every string is encodable (no unknown token) and decoding gives the text back
exactly. Documents are read with zephyr readers (any supported format, path, glob or folder) in a
stable order, so the same input and settings give a byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from marin.execution.core.identity import keep_identities
from rigging import filesystem as fs
from zephyr.readers import OnError, read_documents

__all__ = ["EOS_TOKEN", "BpeTrainingConfig", "train_bpe_tokenizer"]

EOS_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class BpeTrainingConfig:
    """Settings of a byte-level BPE training run.

    Attributes:
        vocab_size: size of the final vocabulary, special tokens and the 256 byte tokens included.
        special_tokens: tokens that are never split; the first one gets id 0. Must include
            ``<|endoftext|>`` (the end-of-document token the loader appends).
        max_documents: train on at most this many documents (the first ones, in file order);
            None for all.
        min_frequency: pairs seen fewer times than this are never merged.
        text_field: field or column holding the text in JSON-lines and Parquet sources.
        on_error: ``raise`` on bad input (default) or ``skip`` it.
    """

    vocab_size: int = 8192
    special_tokens: tuple[str, ...] = (EOS_TOKEN,)
    max_documents: int | None = None
    min_frequency: int = 2
    text_field: str = "text"
    on_error: str = "raise"

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        if EOS_TOKEN not in self.special_tokens:
            raise ValueError(f"special_tokens must include {EOS_TOKEN!r}, got {self.special_tokens}")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise ValueError(f"special_tokens must be distinct, got {self.special_tokens}")
        minimum = 256 + len(self.special_tokens)
        if self.vocab_size < minimum:
            raise ValueError(f"vocab_size must be >= {minimum} (bytes + special tokens), got {self.vocab_size}")
        if self.max_documents is not None and self.max_documents <= 0:
            raise ValueError(f"max_documents must be > 0 or None, got {self.max_documents}")
        if self.min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1, got {self.min_frequency}")
        OnError.coerce(self.on_error)


def train_bpe_tokenizer(
    source_paths: str | Sequence[str],
    output_path: str,
    vocab_size: int = 8192,
    special_tokens: Sequence[str] = (EOS_TOKEN,),
    max_documents: int | None = None,
    *,
    min_frequency: int = 2,
    text_field: str = "text",
    on_error: str = "raise",
) -> str:
    """Train a byte-level BPE on the documents of ``source_paths``; write ``<output_path>/tokenizer.json``.

    ``vocab_size``, ``special_tokens``, ``max_documents``, ``min_frequency``, ``text_field`` and
    ``on_error`` are those of :class:`BpeTrainingConfig`.

    Args:
        source_paths: files, globs or folders (any fsspec URL) of text, JSON lines or Parquet.
        output_path: the folder to write ``tokenizer.json`` into.

    Returns:
        The path of the written ``tokenizer.json``.

    Raises:
        zephyr.errors.DataError: missing or bad input, or no documents at all.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from zephyr.errors import DataError

    config = BpeTrainingConfig(vocab_size=vocab_size, special_tokens=tuple(special_tokens),
                               max_documents=max_documents, min_frequency=min_frequency,
                               text_field=text_field, on_error=on_error)
    documents = read_documents(source_paths, text_field=config.text_field, on_error=config.on_error)
    if config.max_documents is not None:
        documents = itertools.islice(documents, config.max_documents)
    seen = 0

    def counted():
        nonlocal seen
        for doc in documents:
            seen += 1
            yield doc

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(config.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(counted(), trainer=trainer)
    if seen == 0:
        source = source_paths if isinstance(source_paths, str) else ", ".join(source_paths)
        raise DataError(source, "", "empty corpus: no documents to train a tokenizer on")
    target = fs.join(output_path, "tokenizer.json")
    fs.atomic_write(target, tokenizer.to_str())
    return target


# Moved from tokenizer_train.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.tokenizer_train")
