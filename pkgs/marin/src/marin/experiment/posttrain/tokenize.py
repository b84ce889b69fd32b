"""Tokenize preference rows into pair shards (``marin.tokenized_preference/v1``): the ``preference_chat()`` step.

Output layout (read by ``levanter.data.preference``)::

    <out>/train/part-00000.array_record …    one record per pair: the chosen, then the rejected conversation
    <out>/validation/part-00000.array_record …
    <out>/tokenizer.json, <out>/chat_template.json   as a tokenized chat folder's
    <out>/index.json      {"format": "marin.tokenized_preference/v1", "vocab_size", "eos_id", "max_seq_len",
                           "counters": {"pairs", "pairs_too_long", ...}, "splits": …}

Each side is rendered with the chat template as SFT renders a conversation; only the completion's
generation spans (the assistant's text and its end token) are marked, so the prompt's tokens are
the same on both sides and never scored. A pair either side of which is longer than
``max_seq_len`` tokens is dropped and counted (``pairs_too_long``): cutting a completion would change
what is compared. A pair goes to validation by a hash of its rendered prompt, so every pair about
one prompt lands in the same split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.experiment.chat.template import ChatTemplate, TemplateError
from marin.experiment.chat.tokenize import ChatEncoder, write_chat_shards, write_chat_tokenizer
from marin.experiment.data.tokenize import assign_split
from marin.experiment.posttrain.preference import PreferencePair, preferences_dataset
from zephyr import current_context

if TYPE_CHECKING:
    from fray import DistributedClient

__all__ = ["encode_preference", "tokenize_preferences_to_shards"]


def encode_preference(template: ChatTemplate, tokenizer: Any, pair: PreferencePair
                      ) -> tuple[str, tuple[list[int], list[int]], tuple[list[int], list[int]]]:
    """``(rendered prompt, (ids, mask) chosen, (ids, mask) rejected)``: each side's mask on the completion only.

    Raises:
        TemplateError: the template renders the prompt differently inside a conversation, or marks
            nothing of a completion.
    """
    prompt_text = template.render(pair.prompt)
    sides = []
    for side in ("chosen", "rejected"):
        spans = template.render_spans(pair.conversation(side))
        if not "".join(t for t, _ in spans).startswith(prompt_text):
            raise TemplateError("the chat template renders the prompt differently inside the conversation, so the "
                                "completion's tokens cannot be told apart")
        at, marked = 0, []
        for text, generation in spans:
            if generation and at < len(prompt_text) < at + len(text):
                raise TemplateError("a generation span of the chat template straddles the prompt's end")
            marked.append((text, generation and at >= len(prompt_text)))
            at += len(text)
        try:
            sides.append(template.encode_spans(tokenizer, marked))
        except TemplateError:
            raise TemplateError(f"the template marks nothing of the {side} completion (no assistant text)") from None
    return prompt_text, sides[0], sides[1]


@dataclass(frozen=True)
class _EncodePairs(ChatEncoder):
    """Worker-side: a batch of preferences to ``(split, record bytes)`` pairs."""

    template: ChatTemplate
    max_seq_len: int
    seed: int
    validation_fraction: float

    def __call__(self, batch: list[PreferencePair]) -> list[tuple[str, bytes]]:
        from levanter.data.preference import encode_pair

        ctx = current_context()
        out: list[tuple[str, bytes]] = []
        for pair in batch:
            prompt, chosen, rejected = encode_preference(self.template, self._tokenizer, pair)
            ctx.increment("pairs")
            if max(len(chosen[0]), len(rejected[0])) > self.max_seq_len:
                ctx.increment("pairs_too_long")
                continue
            ctx.increment("pair_tokens", len(chosen[0]) + len(rejected[0]))
            out.append((assign_split(prompt, self.seed, self.validation_fraction), encode_pair(chosen, rejected)))
        return out


def tokenize_preferences_to_shards(
    source: str | Sequence[str], tokenizer_path: str, output_path: str, template: ChatTemplate, *,
    max_seq_len: int, validation_fraction: float = 0.05, num_shards: int | None = None, seed: int = 0,
    on_error: str = "raise", batch_size: int = 256, client: DistributedClient | None = None,
) -> dict[str, Any]:
    """Tokenize the preferences of ``source`` into pair shards under ``output_path`` (layout above).

    Returns:
        ``{"index", "counters", "added_tokens", "<split>_records", "<split>_tokens"}``.

    Raises:
        zephyr.DataError: missing or bad input (when ``on_error="raise"``), or no pair that fits.
        marin.experiment.chat.template.TemplateError: the template cannot render a pair.
    """
    from levanter.data.chat import PREFERENCE_FORMAT

    tokenizer, added, out_tokenizer = write_chat_tokenizer(tokenizer_path, output_path, template, max_seq_len)
    encode = _EncodePairs(out_tokenizer, template, max_seq_len, seed, validation_fraction)
    dataset = preferences_dataset(source, num_shards=num_shards, on_error=on_error).batch(batch_size).flat_map(encode)
    return write_chat_shards(dataset, source, output_path, PREFERENCE_FORMAT, tokenizer, template, added, client,
                             max_seq_len=max_seq_len)
