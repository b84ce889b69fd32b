"""Chat data: OpenAI-style ``messages`` and ShareGPT-style ``conversations`` records, normalised.

Both formats become a :class:`Conversation`: a tuple of :class:`Message` (role, content) with
roles ``system``, ``user`` and ``assistant``. ShareGPT speakers map ``human`` to ``user`` and
``gpt`` to ``assistant`` (``user``, ``assistant`` and ``system`` are accepted as they are).

A record is bad, and raises ``zephyr.DataError`` naming file and line (or Parquet record), when
it has neither field, a role outside the three, an empty turn, or does not end with the
assistant (there would be nothing to learn from its last turn). With ``on_error="skip"`` bad
records are counted (``skipped_records``) instead.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from zephyr import Counters, Dataset, OnError, read_records

__all__ = [
    "ChatFormat",
    "Conversation",
    "Message",
    "Role",
    "conversation_from_record",
    "conversations_dataset",
    "messages_from_turns",
    "read_conversations",
]


class Role(enum.Enum):
    """Who speaks a turn."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class ChatFormat(enum.Enum):
    """The two record layouts, named by the field that holds the turns."""

    OPENAI = "messages"
    SHAREGPT = "conversations"


_SHAREGPT_SPEAKERS = {"human": Role.USER, "user": Role.USER, "gpt": Role.ASSISTANT,
                      "assistant": Role.ASSISTANT, "system": Role.SYSTEM}
# Per format: the keys of a turn that hold its speaker and its text, and how speakers map to roles.
_TURN_KEYS = {ChatFormat.OPENAI: ("role", "content"), ChatFormat.SHAREGPT: ("from", "value")}
_SPEAKERS = {ChatFormat.OPENAI: {r.value: r for r in Role}, ChatFormat.SHAREGPT: _SHAREGPT_SPEAKERS}


@dataclass(frozen=True)
class Message:
    """One turn of a conversation."""

    role: Role
    content: str

    def to_json(self) -> dict[str, str]:
        """The OpenAI-style ``{"role", "content"}`` form (what templates see)."""
        return {"role": self.role.value, "content": self.content}


Conversation = tuple[Message, ...]


def conversation_from_record(record: Mapping[str, Any]) -> Conversation:
    """The normalised conversation of one JSON object or Parquet row.

    Raises:
        ValueError: the record is not a valid conversation; the message says what is wrong.
    """
    present = [f for f in ChatFormat if record.get(f.value) is not None]
    if not present:
        keys = ", ".join(sorted(record)[:10]) or "none"
        raise ValueError(f"no 'messages' (OpenAI) or 'conversations' (ShareGPT) field (fields: {keys})")
    if len(present) > 1:
        raise ValueError("both 'messages' and 'conversations' fields; a record must use one format")
    fmt = present[0]
    turns = record[fmt.value]
    if not isinstance(turns, (list, tuple)) or not turns:
        raise ValueError(f"{fmt.value!r} must be a non-empty list of turns, got {_describe(turns)}")
    messages = messages_from_turns(turns, fmt)
    if messages[-1].role is not Role.ASSISTANT:
        raise ValueError(f"the conversation ends with {messages[-1].role.value!r}, not 'assistant' "
                         "(nothing to learn from its last turn)")
    return messages


def messages_from_turns(turns: Any, fmt: ChatFormat | None = None, where: str = "") -> Conversation:
    """The messages of a list of turns in ``fmt``'s layout (None: each turn's keys say, ``role``/``content``
    or ``from``/``value``); ``where`` begins each error message.

    Raises:
        ValueError: a turn that is not an object, has an unknown speaker, or is empty.
    """
    if not isinstance(turns, (list, tuple)):
        raise ValueError(f"{where}expected a list of turns, got {_describe(turns)}")
    messages = []
    for i, turn in enumerate(turns):
        turn_fmt = fmt if fmt is not None else (ChatFormat.SHAREGPT if isinstance(turn, Mapping) and "from" in turn
                                                else ChatFormat.OPENAI)
        speaker_key, text_key = _TURN_KEYS[turn_fmt]
        if not isinstance(turn, Mapping):
            raise ValueError(f"{where}turn {i} is {type(turn).__name__}, not an object with {speaker_key!r} and {text_key!r}")
        speakers = _SPEAKERS[turn_fmt]
        speaker, text = turn.get(speaker_key), turn.get(text_key)
        role = speakers.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise ValueError(f"{where}turn {i}: {speaker_key} {speaker!r} is not one of {', '.join(sorted(speakers))}")
        if not isinstance(text, str):
            raise ValueError(f"{where}turn {i}: {text_key!r} is {_describe(text)}, not a string")
        if not text.strip():
            raise ValueError(f"{where}turn {i} ({role.value}) is empty")
        messages.append(Message(role, text))
    return tuple(messages)


def _describe(value: Any) -> str:
    return "missing" if value is None else "empty" if value in ([], "") else type(value).__name__


def conversations_dataset(source: str | Iterable[str], *, num_shards: int | None = None,
                          on_error: OnError | str = OnError.RAISE) -> Dataset:
    """A zephyr dataset of the conversations in JSON-lines or Parquet files (paths, globs, folders)."""
    return Dataset.from_files(source, num_shards=num_shards, on_error=on_error, record_fn=conversation_from_record)


def read_conversations(source: str | Iterable[str], *, on_error: OnError | str = OnError.RAISE,
                       counters: Counters | None = None) -> Iterator[Conversation]:
    """Every conversation of ``source`` in this process, in file order."""
    return read_records(source, conversation_from_record, on_error=on_error, counters=counters)
