"""A generated chat dataset about the bundled stories: who a story is about, where it happens.

Each conversation shows a story of the bundled corpus (``marin.experiment.data.corpus``) in the user's
first turn and asks two questions the story answers; the assistant answers from the story's facts.
Half the conversations are written OpenAI-style (``chats-openai.jsonl``), half ShareGPT-style
(``chats-sharegpt.jsonl``), so both readers are exercised. Deterministic in ``(seed, index)``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from marin.execution.core.identity import keep_identities
from marin.execution.core.lazy import StepHandle

__all__ = ["StoryChats", "StoryChatsConfig", "story_chat_messages", "story_chats"]


def story_chat_messages(seed: int, index: int) -> list[dict[str, str]]:
    """Conversation ``index``: OpenAI-style messages about story ``index`` of the corpus with ``seed``."""
    from marin.experiment.data.corpus import generate_story, story_facts

    facts = story_facts(seed, index)
    rng = random.Random(f"story-chat:{seed}:{index}")
    who = ("Who is the story about?", f"The story is about {facts.name}, a {facts.kind}.")
    where = (f"Where does the story of {facts.name} happen?", f"It happens in {facts.place}.")
    what = (f"What does {facts.name} have?", f"{facts.name} has a {facts.obj}.")
    first, second = rng.sample([who, where, what], 2)
    return [{"role": "user", "content": f"{generate_story(seed, index)}\n\n{first[0]}"},
            {"role": "assistant", "content": first[1]},
            {"role": "user", "content": second[0]},
            {"role": "assistant", "content": second[1]}]


@dataclass(frozen=True)
class StoryChatsConfig:
    """How many conversations, about the stories of which corpus seed."""

    num_conversations: int = 2000
    seed: int = 1
    """Corpus seed of the stories (1: stories the default pretraining corpus, seed 0, does not hold)."""

    def __post_init__(self) -> None:
        if self.num_conversations < 2:
            raise ValueError(f"num_conversations must be >= 2, got {self.num_conversations}")


def generate_story_chats_step(config: StoryChatsConfig, output_path: str) -> None:
    """Step function: write ``chats-openai.jsonl`` and ``chats-sharegpt.jsonl``."""
    from rigging import filesystem as fs

    openai, sharegpt = [], []
    for i in range(config.num_conversations):
        messages = story_chat_messages(config.seed, i)
        if i % 2 == 0:
            openai.append(json.dumps({"id": i, "messages": messages}))
        else:
            turns = [{"from": "human" if m["role"] == "user" else "gpt", "value": m["content"]} for m in messages]
            sharegpt.append(json.dumps({"id": i, "conversations": turns}))
    fs.atomic_write(fs.join(output_path, "chats-openai.jsonl"), ("\n".join(openai) + "\n").encode())
    fs.atomic_write(fs.join(output_path, "chats-sharegpt.jsonl"), ("\n".join(sharegpt) + "\n").encode())


class StoryChats(StepHandle, fn=generate_story_chats_step):
    """Handle to the generated story chat dataset (a folder of two JSON-lines files)."""


def story_chats(name: str = "raw/story-chats", num_conversations: int = 2000, seed: int = 1) -> StoryChats:
    """The bundled chat dataset: questions and answers about generated stories (nothing downloaded)."""
    return StoryChats(name, StoryChatsConfig(num_conversations=num_conversations, seed=seed))


# Moved from story_chat.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.story_chat")
