"""Lazy handle for preference data: ``preference_chat()``, preference rows to tokenized pair shards."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import StepHandle
from marin.execution.core.sources import source as external_source
from marin.experiment.chat.template import DEFAULT_CHAT_TEMPLATE, ChatTemplate
from marin.experiment.data.sources import as_source, is_hf_id

__all__ = ["PreferenceChatConfig", "TokenizedPreference", "preference_chat", "preference_chat_step",
           "preference_data"]


@dataclass(frozen=True)
class PreferenceChatConfig:
    """What preference data to tokenize, with which tokenizer and template, into how long sides."""

    source: Any
    """Preference rows (JSON lines or Parquet; layouts in ``marin.experiment.posttrain.preference``): a
    path, URL, glob, Hugging Face dataset id, or a step output."""
    tokenizer: Any
    """A tokenizer.json path or URL, a Hugging Face id, or a trained-tokenizer step/handle."""
    template: ChatTemplate = DEFAULT_CHAT_TEMPLATE
    """The chat template (as SFT's: the same template renders the same prompt the same way)."""
    max_seq_len: int = 512
    """Tokens per side at most (prompt and completion); longer pairs are dropped and counted."""
    validation_fraction: float = 0.05
    """Share of prompts (by content hash) whose pairs are held out."""
    seed: int = 0
    """Seed of the train/validation assignment."""
    on_error: str = "raise"
    """``raise`` on a bad row, or ``skip`` it (counted in the index)."""
    num_shards: int | None = None
    """Output shards per split (None: one per input file)."""
    revision: str | None = None
    """The Hugging Face dataset's branch, tag or commit (a Hub id only; None: ``main``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.template, ChatTemplate):
            raise ValueError(f"template must be a ChatTemplate, got {type(self.template).__name__}")
        if not isinstance(self.max_seq_len, int) or isinstance(self.max_seq_len, bool) or self.max_seq_len < 2:
            raise ValueError(f"max_seq_len must be an int >= 2, got {self.max_seq_len!r}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.num_shards is not None and self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0 or None, got {self.num_shards}")
        if self.revision is not None and (not isinstance(self.revision, str) or not self.revision):
            raise ValueError(f"revision must be a non-empty string or None, got {self.revision!r}")


def preference_chat_step(config: PreferenceChatConfig, output_path: str) -> None:
    """Step function: tokenize preference rows into train/validation pair shards."""
    from marin.experiment.data.sources import resolve_source, resolve_tokenizer
    from marin.experiment.posttrain.tokenize import tokenize_preferences_to_shards

    source = resolve_source(config.source, config.revision) if isinstance(config.source, str) else config.source
    with tempfile.TemporaryDirectory(prefix="marin-preference-") as scratch:
        summary = tokenize_preferences_to_shards(
            source, resolve_tokenizer(config.tokenizer, scratch), output_path, config.template,
            max_seq_len=config.max_seq_len, validation_fraction=config.validation_fraction,
            num_shards=config.num_shards, seed=config.seed, on_error=config.on_error)
    c = summary["counters"]
    print(f"tokenized {c.get('pairs', 0)} preference pairs: {summary['train_records']} train / "
          f"{summary['validation_records']} validation, {c.get('pairs_too_long', 0)} longer than "
          f"max_seq_len={config.max_seq_len} dropped, {c.get('skipped_records', 0)} bad rows skipped; "
          f"special tokens added: {summary['added_tokens'] or 'none'}")


class TokenizedPreference(StepHandle, fn=preference_chat_step):
    """Handle to a preference tokenize step; its output holds ``train/``, ``validation/``, the tokenizer and template."""


def preference_chat(name: str, source: Any, tokenizer: Any, *, template: ChatTemplate = DEFAULT_CHAT_TEMPLATE,
                    max_seq_len: int = 512, validation_fraction: float = 0.05, seed: int = 0,
                    on_error: str = "raise", num_shards: int | None = None,
                    revision: str | None = None) -> TokenizedPreference:
    """Preference pairs (a prompt, a chosen and a rejected completion) tokenized for ``dpo(...)``.

    Args:
        name: the step's name.
        source: the rows (see :class:`PreferenceChatConfig`); a Hugging Face dataset id is read
            from the hub cache at ``revision`` (its commit is part of the step's identity).
        tokenizer: the tokenizer (the fine-tuned model's: a ``tokenized_chat`` of the same template
            adds the same special tokens, so ids agree).
        template: the chat template (SFT's).
        max_seq_len: tokens per side at most; longer pairs are dropped and counted.
        validation_fraction: share of prompts held out.
        seed: seed of the train/validation assignment.
        on_error: ``raise`` on a bad row, or ``skip`` it.
        num_shards: output shards per split (None: one per input file).
        revision: the Hugging Face dataset's branch, tag or commit (a Hub id only).

    Raises:
        InvalidStep: a bad argument, naming the handle and the argument.
    """
    try:
        if revision is not None and not (isinstance(source, str) and is_hf_id(source)):
            raise ValueError(f"revision={revision!r} applies to a Hugging Face dataset id, got source={source!r}")
        held = external_source(source, revision) if revision is not None else as_source(source)
        config = PreferenceChatConfig(source=held, tokenizer=as_source(tokenizer, hub=False), template=template,
                                      max_seq_len=max_seq_len, validation_fraction=validation_fraction, seed=seed,
                                      on_error=on_error, num_shards=num_shards, revision=revision)
    except ValueError as e:
        raise InvalidStep(f"preference_chat {name!r}: {e}") from None
    return TokenizedPreference(name, config)


preference_data = preference_chat
"""Another name of :func:`preference_chat`."""
