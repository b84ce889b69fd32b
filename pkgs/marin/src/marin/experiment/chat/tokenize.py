"""Tokenize chat data into ``(input_ids, loss_mask)`` ArrayRecord shards: the ``tokenized_chat()`` step.

Output layout (read by ``levanter.data``; record format in ``levanter.data.chat``)::

    <out>/train/part-00000.array_record …    one record per training sequence
    <out>/validation/part-00000.array_record …
    <out>/tokenizer.json                     the tokenizer, with the template's special tokens added
    <out>/chat_template.json                 the template (Jinja source, special tokens, end token)
    <out>/index.json                         {"format": "marin.tokenized_chat/v1", "vocab_size",
                                              "eos_id" (the end token), "max_seq_len", "packed",
                                              "counters": {"conversations", "truncated_conversations",
                                              "truncated_tokens", …}, "splits": …}

A conversation goes to validation by the same hash as a plain document (of its rendered text).
With ``pack``, conversations of one split are packed in order into records of at most
``max_seq_len`` tokens (a conversation that does not fit starts the next record); each keeps its
own segment, so neither attention nor the loss crosses into its neighbour. A conversation longer
than ``max_seq_len`` is cut to that length and counted (``truncated_conversations``); one whose cut
leaves no assistant token is dropped and counted (``conversations_without_loss``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.core.identity import keep_identities
from marin.experiment.chat import Conversation, conversations_dataset
from marin.experiment.chat.template import ChatTemplate, add_special_tokens
from marin.experiment.data.tokenize import SPLITS, TokenizedSink, assign_split, split_totals, write_shards
from rigging import filesystem as fs
from zephyr import current_context

if TYPE_CHECKING:
    from fray import DistributedClient

__all__ = ["TEMPLATE_FILE", "ChatEncoder", "load_chat_template", "prepare_chat_tokenizer", "template_to_json",
           "tokenize_chat_to_shards", "write_chat_shards", "write_chat_tokenizer"]

TEMPLATE_FILE = "chat_template.json"


def template_to_json(template: ChatTemplate) -> str:
    """The template as stored beside the tokenizer."""
    return json.dumps(dataclasses.asdict(template) | {"special_tokens": list(template.special_tokens)},
                      indent=2, sort_keys=True) + "\n"


def load_chat_template(folder: str) -> ChatTemplate:
    """The template stored in a tokenized chat folder (or any folder holding ``chat_template.json``).

    Raises:
        FileNotFoundError: the folder holds no template.
    """
    path = fs.join(folder, TEMPLATE_FILE)
    if not fs.exists(path):
        raise FileNotFoundError(f"{path} not found: {folder} holds no chat template (is it a tokenized_chat output?)")
    data = json.loads(fs.read_text(path))
    return ChatTemplate(source=data["source"], special_tokens=tuple(data["special_tokens"]),
                        end_token=data["end_token"])


def prepare_chat_tokenizer(tokenizer_json: str, template: ChatTemplate) -> tuple[Any, list[str]]:
    """The tokenizer with the template's missing special tokens added, and the tokens added."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    return tokenizer, add_special_tokens(tokenizer, template.special_tokens)


@dataclass(frozen=True)
class ChatEncoder:
    """Worker-side base of the chat folders' encoders: the tokenizer the shards are made with
    (``tokenizer_path``, as :func:`write_chat_tokenizer` wrote it), read once per worker."""

    tokenizer_path: str

    @functools.cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        return Tokenizer.from_str(fs.read_text(self.tokenizer_path))


@dataclass(frozen=True)
class _EncodeChats(ChatEncoder):
    """Worker-side: a batch of conversations to ``(split, record bytes)`` pairs, packed per split."""

    template: ChatTemplate
    max_seq_len: int
    pack: bool
    seed: int
    validation_fraction: float

    def __call__(self, batch: list[Conversation]) -> list[tuple[str, bytes]]:
        from levanter.data.chat import encode_chat_record

        ctx = current_context()
        pending: dict[str, list[tuple[list[int], list[int]]]] = {s: [] for s in SPLITS}
        fill = dict.fromkeys(SPLITS, 0)
        out: list[tuple[str, bytes]] = []
        for conversation in batch:
            spans = self.template.render_spans(conversation)  # rendered once: for the ids and the split
            ids, mask = self.template.encode_spans(self._tokenizer, spans)
            ctx.increment("conversations")
            if len(ids) > self.max_seq_len:
                ctx.increment("truncated_conversations")
                ctx.increment("truncated_tokens", len(ids) - self.max_seq_len)
                ids, mask = ids[:self.max_seq_len], mask[:self.max_seq_len]
                if not any(mask[1:]):
                    ctx.increment("conversations_without_loss")
                    continue
            split = assign_split("".join(t for t, _ in spans), self.seed, self.validation_fraction)
            if not self.pack:
                out.append((split, encode_chat_record([(ids, mask)])))
                continue
            if fill[split] + len(ids) > self.max_seq_len:
                out.append((split, encode_chat_record(pending[split])))
                pending[split], fill[split] = [], 0
            pending[split].append((ids, mask))
            fill[split] += len(ids)
        out.extend((split, encode_chat_record(convs)) for split, convs in pending.items() if convs)
        return out


def tokenize_chat_to_shards(
    source: str | Sequence[str],
    tokenizer_path: str,
    output_path: str,
    template: ChatTemplate,
    *,
    max_seq_len: int,
    pack: bool = True,
    validation_fraction: float = 0.02,
    num_shards: int | None = None,
    seed: int = 0,
    on_error: str = "raise",
    batch_size: int = 256,
    client: DistributedClient | None = None,
) -> dict[str, Any]:
    """Tokenize the conversations of ``source`` into chat shards under ``output_path`` (layout above).

    Packing happens within batches of ``batch_size`` conversations (per shard, in file order).

    Returns:
        ``{"index", "counters", "added_tokens", "<split>_records", "<split>_tokens"}``.

    Raises:
        zephyr.DataError: missing or bad input (when ``on_error="raise"``) or no conversation at all.
        marin.experiment.chat.template.TemplateError: the template cannot render a conversation.
    """
    from levanter.data.chat import CHAT_FORMAT

    tokenizer, added, out_tokenizer = write_chat_tokenizer(tokenizer_path, output_path, template, max_seq_len)
    encode = _EncodeChats(out_tokenizer, template, max_seq_len, pack, seed, validation_fraction)
    dataset = (conversations_dataset(source, num_shards=num_shards, on_error=on_error)
               .batch(batch_size).flat_map(encode))
    return write_chat_shards(dataset, source, output_path, CHAT_FORMAT, tokenizer, template, added, client,
                             max_seq_len=max_seq_len, packed=pack)


def write_chat_tokenizer(tokenizer_path: str, output_path: str, template: ChatTemplate,
                         max_seq_len: int) -> tuple[Any, list[str], str]:
    """The tokenizer at ``tokenizer_path`` with ``template``'s special tokens added, written with the
    template into ``output_path`` (``tokenizer.json``, ``chat_template.json``): the tokenizer the
    shards are made with and the template travel with them, so a fine-tuned model is sampled with
    exactly these. Returns the tokenizer, the tokens added and the path of the one written.

    Raises:
        ValueError: ``max_seq_len`` below 2, or a vocabulary the chat record format cannot hold.
    """
    from levanter.data.chat import MAX_CHAT_VOCAB

    if max_seq_len < 2:
        raise ValueError(f"max_seq_len must be >= 2, got {max_seq_len}")
    tokenizer, added = prepare_chat_tokenizer(fs.read_text(tokenizer_path), template)
    vocab_size = tokenizer.get_vocab_size()
    if vocab_size > MAX_CHAT_VOCAB:
        raise ValueError(f"tokenizer {tokenizer_path}: vocabulary of {vocab_size} exceeds the chat format's {MAX_CHAT_VOCAB}")
    out_tokenizer = fs.join(output_path, "tokenizer.json")
    fs.atomic_write(out_tokenizer, tokenizer.to_str().encode("utf-8"))
    fs.atomic_write(fs.join(output_path, TEMPLATE_FILE), template_to_json(template).encode("utf-8"))
    return tokenizer, added, out_tokenizer


def write_chat_shards(dataset: Any, source: str | Sequence[str], output_path: str, format_name: str, tokenizer: Any,
                      template: ChatTemplate, added: list[str], client: DistributedClient | None,
                      **metadata: Any) -> dict[str, Any]:
    """Write ``dataset``'s ``(split, record)`` pairs as the shards of a chat folder of ``format_name``
    (its index has the vocabulary, the end token's id and ``metadata``); returns ``{"index",
    "counters", "added_tokens", "<split>_records", "<split>_tokens"}``."""
    description = source if isinstance(source, str) else ", ".join(source)
    sink = TokenizedSink(output_path=output_path, splits=SPLITS, format_name=format_name,
                         metadata={"vocab_size": tokenizer.get_vocab_size(),
                                   "eos_id": tokenizer.token_to_id(template.end_token), **metadata},
                         source_description=description)
    result = write_shards(dataset, sink, source, client, max_parallel=min(os.cpu_count() or 1, dataset.num_shards))
    index = result.index or {}
    return {"index": index, "counters": dict(result.counters), "added_tokens": added, **split_totals(index)}


# Moved from chat_tokenize.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.chat_tokenize")
