"""Preference rows: a prompt with a chosen and a rejected completion, in the layouts preference sets use.

A row (a JSON object or Parquet row) holds ``chosen`` and ``rejected`` and, optionally, ``prompt``:

* without ``prompt``, ``chosen`` and ``rejected`` are whole conversations (a list of turns,
  OpenAI ``{role, content}`` or ShareGPT ``{from, value}``) that share every turn but their last,
  the assistant's: those shared turns are the prompt;
* with ``prompt`` (a string: one user turn; or a list of turns), ``chosen`` and ``rejected`` are
  the completions (a string: one assistant turn; or a list of turns starting with the
  assistant's), or whole conversations that begin with the prompt (UltraFeedback-binarized's
  layout), whose prompt turns are dropped.

A completion must end with the assistant. A row is bad, and raises ``zephyr.DataError`` naming its
file and line, when a side is missing, a completion is empty, the two sides' prompts differ, or a
turn is malformed; with ``on_error="skip"`` it is counted (``skipped_records``) instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from marin.experiment.chat import Conversation, Message, Role, messages_from_turns
from zephyr import Counters, Dataset, OnError, read_records

__all__ = ["PreferencePair", "preference_from_record", "preferences_dataset", "read_preferences"]

_SIDES = ("chosen", "rejected")


@dataclass(frozen=True)
class PreferencePair:
    """One preference: the prompt's turns, and the chosen and the rejected completion's turns."""

    prompt: Conversation
    chosen: Conversation
    rejected: Conversation

    def conversation(self, side: str) -> Conversation:
        """The prompt followed by the ``"chosen"`` or ``"rejected"`` completion."""
        return self.prompt + (self.chosen if side == "chosen" else self.rejected)


def _turns(value: Any, field: str, default_role: Role) -> Conversation:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"the {field!r} completion is empty" if field in _SIDES else f"the {field!r} is empty")
        return (Message(default_role, value),)
    if isinstance(value, list | tuple) and not value:
        raise ValueError(f"the {field!r} completion is empty" if field in _SIDES else f"the {field!r} is empty")
    return messages_from_turns(value, where=f"{field!r}: ")


def _first_difference(a: Conversation, b: Conversation) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _split_shared(prompt: Conversation, side: Conversation, field: str) -> Conversation:
    """The completion of ``side``: its turns after ``prompt`` when it repeats it, else all of them."""
    if side[0].role is Role.ASSISTANT:  # the completion alone
        return side
    if side[:len(prompt)] != prompt or len(side) == len(prompt):  # a whole conversation, but with another prompt
        raise ValueError(f"the prompt differs between 'prompt' and {field!r} (turn {_first_difference(prompt, side)})")
    return side[len(prompt):]


def preference_from_record(record: Mapping[str, Any]) -> PreferencePair:
    """The preference of one row (layouts in the module docstring).

    Raises:
        ValueError: one line saying what is wrong with the row.
    """
    missing = [k for k in _SIDES if record.get(k) is None]
    if missing:
        keys = ", ".join(sorted(record)[:10]) or "none"
        raise ValueError(f"a preference row needs both 'chosen' and 'rejected', this one has no "
                         f"{' and no '.join(repr(m) for m in missing)} (fields: {keys})")
    chosen, rejected = (_turns(record[k], k, Role.ASSISTANT) for k in _SIDES)
    if record.get("prompt") is None:
        if len(chosen) < 2 or len(rejected) < 2:
            raise ValueError("without a 'prompt', 'chosen' and 'rejected' must be whole conversations (the prompt's "
                             "turns, then the completion)")
        prompt = chosen[:-1]
        if rejected[:-1] != prompt:
            raise ValueError(f"the prompt differs between 'chosen' and 'rejected' (turn "
                             f"{_first_difference(prompt, rejected[:-1])})")
        chosen, rejected = chosen[-1:], rejected[-1:]
    else:
        prompt = _turns(record["prompt"], "prompt", Role.USER)
        chosen, rejected = _split_shared(prompt, chosen, "chosen"), _split_shared(prompt, rejected, "rejected")
    for side, turns in zip(_SIDES, (chosen, rejected), strict=True):
        if turns[-1].role is not Role.ASSISTANT:
            raise ValueError(f"the {side!r} completion ends with {turns[-1].role.value!r}, not 'assistant'")
    return PreferencePair(prompt=prompt, chosen=chosen, rejected=rejected)


def preferences_dataset(source: str | Iterable[str], *, num_shards: int | None = None,
                        on_error: OnError | str = OnError.RAISE) -> Dataset:
    """A zephyr dataset of the preferences in JSON-lines or Parquet files (paths, globs, folders)."""
    return Dataset.from_files(source, num_shards=num_shards, on_error=on_error, record_fn=preference_from_record)


def read_preferences(source: str | Iterable[str], *, on_error: OnError | str = OnError.RAISE,
                     counters: Counters | None = None) -> Iterator[PreferencePair]:
    """Every preference of ``source`` in this process, in file order."""
    return read_records(source, preference_from_record, on_error=on_error, counters=counters)
