"""Lazy handle for chat data: ``tokenized_chat()``, conversations to (input_ids, loss_mask) shards."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle
from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE, ChatTemplate
from marin.experiment.data.sources import as_source

__all__ = ["TokenizeChatStepConfig", "TokenizedChat", "tokenize_chat_step", "tokenized_chat"]


@dataclass(frozen=True)
class TokenizeChatStepConfig:
    """What chat data to tokenize, with which tokenizer and template, into how long sequences."""

    source: Any
    """Chat records (JSON lines or Parquet): a path, URL, glob, Hugging Face dataset id, or a step output."""
    tokenizer: Any
    """A tokenizer.json path or URL, a Hugging Face id, or a trained-tokenizer step/handle."""
    template: ChatTemplate = DEFAULT_CHAT_TEMPLATE
    """The chat template (its text is part of this step's identity)."""
    max_seq_len: int = 512
    """Tokens per record; longer conversations are cut (and counted)."""
    pack: bool = True
    """Pack several conversations into one record (each in its own attention segment)."""
    validation_fraction: float = 0.05
    """Share of conversations (by content hash) held out for validation."""
    seed: int = 0
    """Seed of the train/validation assignment."""
    on_error: str = "raise"
    """``raise`` on a bad record, or ``skip`` it (counted in the index)."""
    num_shards: int | None = None
    """Output shards per split (None: one per input file)."""

    def __post_init__(self) -> None:
        if not isinstance(self.template, ChatTemplate):
            raise ValueError(f"template must be a ChatTemplate, got {type(self.template).__name__}")
        if not isinstance(self.max_seq_len, int) or self.max_seq_len < 2:
            raise ValueError(f"max_seq_len must be an int >= 2, got {self.max_seq_len!r}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.num_shards is not None and self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0 or None, got {self.num_shards}")


def tokenize_chat_step(config: TokenizeChatStepConfig, output_path: str) -> None:
    """Step function: tokenize conversations into train/validation chat shards (resumable)."""
    from marin.experiment.chat.tokenize import tokenize_chat_to_shards
    from marin.experiment.data.sources import resolve_source, resolve_tokenizer

    source = resolve_source(config.source) if isinstance(config.source, str) else config.source
    with tempfile.TemporaryDirectory(prefix="marin-chat-") as scratch:
        summary = tokenize_chat_to_shards(
            source, resolve_tokenizer(config.tokenizer, scratch), output_path, config.template,
            max_seq_len=config.max_seq_len, pack=config.pack, validation_fraction=config.validation_fraction,
            num_shards=config.num_shards, seed=config.seed, on_error=config.on_error)
    c = summary["counters"]
    print(f"tokenized {c.get('conversations', 0)} conversations: "
          f"{summary['train_records']} train / {summary['validation_records']} validation sequences, "
          f"{c.get('truncated_conversations', 0)} truncated ({c.get('truncated_tokens', 0)} tokens cut), "
          f"{c.get('skipped_records', 0)} bad records skipped; special tokens added: {summary['added_tokens'] or 'none'}")


class TokenizedChat(StepHandle, fn=tokenize_chat_step):
    """Handle to a chat tokenize step; its output holds ``train/``, ``validation/``, the tokenizer and template."""


def tokenized_chat(name: str, source: Any, tokenizer: Any, *, template: ChatTemplate = DEFAULT_CHAT_TEMPLATE,
                   max_seq_len: int = 512, pack: bool = True, validation_fraction: float = 0.05, seed: int = 0,
                   on_error: str = "raise", num_shards: int | None = None) -> TokenizedChat:
    """Chat shards of ``(input_ids, loss_mask)`` for fine-tuning (see :class:`TokenizeChatStepConfig`)."""
    return TokenizedChat(name, TokenizeChatStepConfig(
        source=as_source(source), tokenizer=as_source(tokenizer, hub=False), template=template,
        max_seq_len=max_seq_len, pack=pack, validation_fraction=validation_fraction, seed=seed,
        on_error=on_error, num_shards=num_shards))


# Moved from chat_data.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.chat_data")
