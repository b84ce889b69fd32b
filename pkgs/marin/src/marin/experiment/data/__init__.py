"""Lazy handles for data steps: the bundled corpus, trained tokenizers and tokenized shards.

Building a handle runs nothing and touches no storage; ``lower()`` turns it into a cached step.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.core.lazy import StepHandle
from marin.execution.core.traits import StepTraits, step_function
from marin.experiment.data.sources import as_source
from marin.processing.incremental import IncrementalStart

if TYPE_CHECKING:
    pass

__all__ = [
    "BundledCorpus",
    "Tokenized",
    "TrainedTokenizer",
    "bundled_corpus",
    "pretokenized",
    "tokenized",
    "trained_tokenizer",
]


@dataclass(frozen=True)
class CorpusStepConfig:
    """The synthetic TinyStories-like corpus: how many stories, which seed, how many files."""

    num_stories: int = 10_000
    seed: int = 0
    num_shards: int = 8

    def __post_init__(self) -> None:
        if self.num_stories <= 0:
            raise ValueError(f"num_stories must be > 0, got {self.num_stories}")
        if self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0, got {self.num_shards}")


def generate_corpus_step(config: CorpusStepConfig, output_path: str) -> None:
    """Step function: write the bundled corpus as JSON-lines shards."""
    from marin.experiment.data.corpus import generate_corpus

    generate_corpus(output_path, num_stories=config.num_stories, seed=config.seed, num_shards=config.num_shards)


class BundledCorpus(StepHandle, fn=generate_corpus_step):
    """Handle to the project's own deterministic corpus of short stories (nothing downloaded)."""


def bundled_corpus(name: str = "raw/tinystories-synthetic", num_stories: int = 10_000, seed: int = 0,
                   num_shards: int = 8) -> BundledCorpus:
    """The embedded default corpus (about 0.58 KB a story: 10,000 stories are about 5.8 MB)."""
    return BundledCorpus(name, CorpusStepConfig(num_stories=num_stories, seed=seed, num_shards=num_shards))


@dataclass(frozen=True)
class TrainTokenizerConfig:
    """A byte-level BPE trained with HF ``tokenizers``."""

    source: Any
    """Corpus: a path, URL or glob, or a step/handle whose output holds the text files."""
    vocab_size: int = 4096
    """Size of the vocabulary, special tokens included."""
    max_documents: int | None = None
    """Train on at most this many documents (None: all)."""
    special_tokens: tuple[str, ...] = ("<|endoftext|>",)
    """Tokens added whole; the first is the end-of-document token."""
    min_frequency: int = 2
    """Merges seen fewer times than this are not learned."""
    text_field: str = "text"
    """Field holding the text in JSON lines and Parquet."""

    def __post_init__(self) -> None:
        if self.vocab_size < 256 + len(self.special_tokens):
            raise ValueError(f"vocab_size must be >= {256 + len(self.special_tokens)} for a byte-level BPE, got {self.vocab_size}")


def train_tokenizer_step(config: TrainTokenizerConfig, output_path: str) -> None:
    """Step function: train the BPE and write ``tokenizer.json``."""
    from marin.experiment.data.sources import resolve_source
    from marin.experiment.data.tokenizer import train_bpe_tokenizer

    source = resolve_source(config.source) if isinstance(config.source, str) else config.source
    train_bpe_tokenizer(source, output_path, vocab_size=config.vocab_size,
                        special_tokens=config.special_tokens, max_documents=config.max_documents,
                        min_frequency=config.min_frequency, text_field=config.text_field)


class TrainedTokenizer(StepHandle, fn=train_tokenizer_step):
    """Handle to a tokenizer-training step; its output folder holds ``tokenizer.json``."""


def trained_tokenizer(name: str, source: Any, vocab_size: int = 4096, *, max_documents: int | None = None,
                      special_tokens: tuple[str, ...] = ("<|endoftext|>",), min_frequency: int = 2,
                      text_field: str = "text") -> TrainedTokenizer:
    """A byte-level BPE tokenizer trained on ``source`` by a cached step."""
    return TrainedTokenizer(name, TrainTokenizerConfig(
        source=as_source(source), vocab_size=vocab_size, max_documents=max_documents,
        special_tokens=tuple(special_tokens), min_frequency=min_frequency, text_field=text_field))


@dataclass(frozen=True)
class TokenizeStepConfig:
    """What to tokenize, with which tokenizer, and how to shard and split it."""

    source: Any
    """Corpus: a path, URL, glob, Hugging Face dataset id, or a step/handle output."""
    tokenizer: Any
    """A tokenizer.json path or URL, a Hugging Face id, or a trained-tokenizer step/handle."""
    sample_count: int | None = None
    """At most this many documents from each shard (None: all)."""
    validation_fraction: float = 0.02
    """Share of documents (by content hash) held out for validation (a Hugging Face dataset with a
    validation split uses that split instead)."""
    num_shards: int | None = None
    """Output shards per split (None: one per input file)."""
    seed: int = 0
    """Seed of the train/validation assignment."""
    on_error: str = "raise"
    """``raise`` on bad input, or ``skip`` it (counted in the index)."""
    text_field: str = "text"
    """Field holding the text in JSON lines and Parquet."""

    def __post_init__(self) -> None:
        if self.sample_count is not None and self.sample_count <= 0:
            raise ValueError(f"sample_count must be > 0 or None, got {self.sample_count}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")


@step_function(StepTraits(plan_start=IncrementalStart(("source",))))
def tokenize_step(config: TokenizeStepConfig, output_path: str) -> None:
    """Step function: tokenize the corpus into train/validation ArrayRecord shards (resumable; file by
    file over a changed file set: :mod:`marin.experiment.data.tokenize_parts`)."""
    # Here, not at import: an experiment file that only builds handles must not load tokenizers and zephyr.
    from marin.experiment.data.sources import is_hf_id, resolve_corpus, resolve_tokenizer
    from marin.experiment.data.tokenize import tokenize_to_shards
    from marin.experiment.data.tokenize_parts import shard_parts

    source, validation = resolve_corpus(config.source) if isinstance(config.source, str) else (config.source, [])
    hub = isinstance(config.source, str) and is_hf_id(config.source) and source != config.source
    parts = None if hub else shard_parts(source, config.num_shards, validation)
    with tempfile.TemporaryDirectory(prefix="marin-tok-") as scratch:
        tokenizer_path = resolve_tokenizer(config.tokenizer, scratch)
        summary = tokenize_to_shards(
            source, tokenizer_path, output_path, validation_fraction=config.validation_fraction,
            sample_count=config.sample_count, num_shards=config.num_shards, seed=config.seed,
            on_error=config.on_error, text_field=config.text_field, validation_source=validation, parts=parts)
    splits = summary.get("index", {}).get("splits", {})
    print("tokenized: " + ", ".join(f"{k}: {v.get('records')} documents, {v.get('tokens')} tokens"
                                    for k, v in splits.items()))


class Tokenized(StepHandle, fn=tokenize_step):
    """Handle to a tokenize step; its output holds ``train/`` and ``validation/`` shards."""


def tokenized(name: str, source: Any, tokenizer: Any, sample_count: int | None = None, *,
              validation_fraction: float = 0.02, num_shards: int | None = None, seed: int = 0,
              on_error: str = "raise", text_field: str = "text", version: str = "v1") -> Tokenized:
    """Tokenized train/validation shards of ``source`` (see :class:`TokenizeStepConfig`).

    ``version`` works as for every step (``"dev"`` rebuilds on every run).
    """
    return Tokenized(name, TokenizeStepConfig(
        source=as_source(source), tokenizer=as_source(tokenizer, hub=False), sample_count=sample_count,
        validation_fraction=validation_fraction, num_shards=num_shards, seed=seed, on_error=on_error,
        text_field=text_field), version=version)


def pretokenized(name: str, repo_id: str, tokenizer: Any = None, version: str = "v1", **_: Any) -> Tokenized:
    """Marin's prebuilt Levanter token caches: not supported here.

    Raises:
        ValueError: always, naming the repository and what to use instead.
    """
    raise ValueError(
        f"pretokenized({name!r}, repo_id={repo_id!r}): prebuilt Levanter token caches are not supported; "
        "tokenize the raw text instead with tokenized(name, source=<dataset id or path>, tokenizer=...)")
