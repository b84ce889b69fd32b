"""A generated preference set about the bundled stories: the right answer chosen, a wrong one rejected.

Each pair shows a story of the bundled corpus (``marin.experiment.data.corpus``) in the user's turn
and asks one of the questions the story chats ask (:mod:`marin.experiment.tasks.story_chat`: who
it is about, where it happens, what the hero has); the chosen answer is the story's answer to it,
the rejected one the story's answer to another of those questions. Both state facts of the same
story in the chats' words, so what tells them apart is the question: a preference a nano model
learns in a few steps (told a story's fact from another story's, it is at chance, as its story-task
scores show). Half the rows are written in TRL's layout (``prompt``, ``chosen`` and ``rejected``
strings, ``prefs-trl.jsonl``), half in UltraFeedback-binarized's (a ``prompt`` string, ``chosen`` and
``rejected`` whole conversations, ``prefs-ultrafeedback.jsonl``), so both readers are exercised.
Deterministic in ``(seed, index)``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from marin.execution.core.errors import InvalidStep
from marin.execution.core.lazy import StepHandle

__all__ = ["StoryPreferences", "StoryPreferencesConfig", "story_preference", "story_preferences"]


def story_preference(seed: int, index: int) -> dict[str, str]:
    """Pair ``index``: ``{"prompt", "chosen", "rejected"}`` about story ``index`` of the corpus with ``seed``."""
    from marin.experiment.data.corpus import generate_story, story_facts

    facts = story_facts(seed, index)
    answers = {"who": ("Who is the story about?", f"The story is about {facts.name}, a {facts.kind}."),
               "where": (f"Where does the story of {facts.name} happen?", f"It happens in {facts.place}."),
               "what": (f"What does {facts.name} have?", f"{facts.name} has a {facts.obj}.")}
    asked, other = random.Random(f"story-preference:{seed}:{index}").sample(sorted(answers), 2)
    question, right = answers[asked]
    return {"prompt": f"{generate_story(seed, index)}\n\n{question}", "chosen": right, "rejected": answers[other][1]}


@dataclass(frozen=True)
class StoryPreferencesConfig:
    """How many pairs, about the stories of which corpus seed, from which story on."""

    num_pairs: int = 2000
    seed: int = 1
    """Corpus seed of the stories (1: stories the default pretraining corpus, seed 0, does not hold)."""
    first_index: int = 0
    """The story of the first pair."""

    def __post_init__(self) -> None:
        if not isinstance(self.num_pairs, int) or isinstance(self.num_pairs, bool) or self.num_pairs < 2:
            raise ValueError(f"num_pairs must be an int >= 2, got {self.num_pairs!r}")
        if not isinstance(self.first_index, int) or self.first_index < 0:
            raise ValueError(f"first_index must be an int >= 0, got {self.first_index!r}")


def generate_story_preferences_step(config: StoryPreferencesConfig, output_path: str) -> None:
    """Step function: write ``prefs-trl.jsonl`` and ``prefs-ultrafeedback.jsonl``."""
    from rigging import filesystem as fs

    trl, ultrafeedback = [], []
    for i in range(config.first_index, config.first_index + config.num_pairs):
        row = story_preference(config.seed, i)
        if i % 2 == 0:
            trl.append(json.dumps({"id": i, **row}))
        else:
            user = {"role": "user", "content": row["prompt"]}
            ultrafeedback.append(json.dumps({"id": i, "prompt": row["prompt"], **{
                side: [user, {"role": "assistant", "content": row[side]}] for side in ("chosen", "rejected")}}))
    fs.atomic_write(fs.join(output_path, "prefs-trl.jsonl"), ("\n".join(trl) + "\n").encode())
    fs.atomic_write(fs.join(output_path, "prefs-ultrafeedback.jsonl"), ("\n".join(ultrafeedback) + "\n").encode())


class StoryPreferences(StepHandle, fn=generate_story_preferences_step):
    """Handle to the generated story preference set (a folder of two JSON-lines files)."""


def story_preferences(name: str = "raw/story-preferences", num_pairs: int = 2000, seed: int = 1,
                      first_index: int = 0) -> StoryPreferences:
    """The bundled preference set: right and wrong answers about generated stories (nothing downloaded).

    Raises:
        InvalidStep: a bad argument, naming the handle and the argument.
    """
    try:
        config = StoryPreferencesConfig(num_pairs=num_pairs, seed=seed, first_index=first_index)
    except ValueError as e:
        raise InvalidStep(f"story_preferences {name!r}: {e}") from None
    return StoryPreferences(name, config)
