"""A deterministic generator of short children's stories, the project's bundled default corpus.

Stories are built from the word lists and plot templates below (nothing is downloaded): a hero
with a name and a kind, a place, a treasured object, a problem, friends who help or tease,
dialogue, a turning point and an ending with a lesson. Every story is drawn from its own
``random.Random`` seeded by ``(seed, story index)``, so the corpus is the same on every machine
and a story does not depend on how the corpus is sharded.

The output is JSON lines, ``{"id": i, "text": story}``, in ``stories-00000.jsonl`` … with story
``i`` in shard ``i * num_shards // num_stories`` (contiguous blocks, in order).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from marin.execution.core.identity import keep_identities
from rigging import filesystem as fs

__all__ = ["DEFAULT_NUM_SHARDS", "DEFAULT_NUM_STORIES", "CorpusConfig", "StoryFacts", "generate_corpus", "generate_story",
           "story_facts"]

# About 580 bytes a story: 10,000 stories make about 5.8 MB.
DEFAULT_NUM_STORIES = 10_000
DEFAULT_NUM_SHARDS = 8

_NAMES = (
    "Lily", "Tom", "Mia", "Ben", "Sue", "Max", "Anna", "Sam", "Lucy", "Jack", "Emma", "Leo", "Zoe",
    "Finn", "Ruby", "Oscar", "Ella", "Noah", "Grace", "Theo", "Ivy", "Jake", "Rosa", "Eli", "Nora",
    "Hugo", "Maya", "Kai", "Daisy", "Omar", "Pip", "Luna", "Toby", "Wren", "Milo", "Hazel", "Otto",
    "Clara", "Felix", "June", "Arlo", "Bella", "Remy", "Iris", "Nico", "Poppy", "Jonah", "Tess",
)
_KINDS = (
    ("little girl", "she", "her"), ("little boy", "he", "his"), ("small rabbit", "she", "her"),
    ("brave mouse", "he", "his"), ("curious cat", "she", "her"), ("friendly dog", "he", "his"),
    ("young bear", "he", "his"), ("tiny bird", "she", "her"), ("happy duck", "she", "her"),
    ("clever fox", "he", "his"), ("gentle elephant", "she", "her"), ("little frog", "he", "his"),
    ("shy turtle", "she", "her"), ("busy squirrel", "he", "his"), ("sleepy owl", "she", "her"),
    ("kind robot", "he", "his"), ("little dragon", "she", "her"), ("silly monkey", "he", "his"),
)
_PLACES = (
    "a small town by the sea", "a big green forest", "a quiet farm", "a busy city", "a sunny meadow",
    "a tall castle on a hill", "a cozy house near the river", "a little village in the mountains",
    "a garden full of flowers", "an old lighthouse", "a snowy valley", "a bright school",
    "a noisy market", "a warm kitchen", "a park with a big pond", "a boat on a blue lake",
    "a cave behind a waterfall", "a field of tall yellow corn", "a treehouse in an oak tree",
)
_OBJECTS = (
    ("red ball", "round and shiny"), ("blue kite", "light and fast"), ("teddy bear", "soft and warm"),
    ("toy car", "small and quick"), ("picture book", "full of colors"), ("shiny key", "old and golden"),
    ("wooden boat", "painted green"), ("yellow hat", "big and floppy"), ("music box", "sweet and tiny"),
    ("magic stone", "smooth and glowing"), ("paper crown", "bright and gold"), ("little drum", "loud and fun"),
    ("jar of honey", "sticky and sweet"), ("pair of boots", "red and muddy"), ("map", "torn at the corner"),
    ("flashlight", "strong and bright"), ("seed", "tiny and brown"), ("blanket", "striped and soft"),
    ("bell", "silver and clear"), ("basket of apples", "heavy and red"), ("crayon box", "new and full"),
)
_FRIENDS = (
    "a wise old owl", "a grumpy goat", "a playful puppy", "a tall giraffe", "a kind grandmother",
    "a busy bee", "a little snail", "a friendly baker", "a funny clown", "a quiet deer",
    "a strong horse", "a small ant", "a chatty parrot", "a patient teacher", "a fluffy sheep",
    "a brave knight", "a lost kitten", "a happy pig", "a gentle cow", "a singing fish",
)
_FEELINGS_BAD = ("sad", "scared", "worried", "angry", "lonely", "upset", "nervous", "confused")
_FEELINGS_GOOD = ("happy", "proud", "glad", "excited", "calm", "thankful", "joyful", "brave")
_WEATHER = (
    "The sun was shining.", "It was a windy day.", "Rain was falling softly.", "Snow covered the ground.",
    "The sky was grey and cloudy.", "It was a warm spring morning.", "The stars were out.",
    "A cool breeze moved the leaves.", "It was very hot outside.", "Fog hid the hills.",
)
_ACTIONS = (
    "ran", "jumped", "looked", "searched", "climbed", "walked", "hopped", "swam", "crawled", "skipped",
    "danced", "peeked", "tiptoed", "raced", "wandered", "marched",
)
_SPOTS = (
    "under the bed", "behind the big tree", "near the river", "inside a box", "on top of the hill",
    "under a rock", "in the tall grass", "next to the fence", "by the old well", "in the barn",
    "under the bridge", "behind the door", "in the garden", "near the pond", "under the table",
)
_SAYINGS = (
    "Do not give up!", "We can do it together.", "Let us look one more time.", "I will help you.",
    "Be careful!", "What a great idea!", "Can I play too?", "Thank you so much!", "I am sorry.",
    "Look over there!", "That is not fair.", "Please wait for me!", "We are a good team.",
    "It is okay to be afraid.", "Let us share it.", "I have a plan.",
)
_LESSONS = (
    "sharing makes everyone happy", "friends help each other", "it is good to be kind",
    "being brave does not mean you are not afraid", "saying sorry can fix a lot",
    "patience brings good things", "listening is important", "working together is better than alone",
    "it is okay to ask for help", "small things can matter a lot", "telling the truth is always best",
    "trying again is how you learn", "everyone is good at something", "home is where your friends are",
)
_PLOTS = ("lost", "share", "storm", "race", "bake", "plant", "fear", "gift", "build", "new_friend")


@dataclass(frozen=True)
class CorpusConfig:
    """Size and seed of the generated corpus.

    Attributes:
        num_stories: how many stories to write (must be > 0).
        seed: the seed; the same seed gives byte-identical files.
        num_shards: how many JSON-lines files to split the stories into (1 <= shards <= stories).
    """

    num_stories: int = DEFAULT_NUM_STORIES
    seed: int = 0
    num_shards: int = DEFAULT_NUM_SHARDS

    def __post_init__(self) -> None:
        if self.num_stories <= 0:
            raise ValueError(f"num_stories must be > 0, got {self.num_stories}")
        if self.num_shards <= 0:
            raise ValueError(f"num_shards must be > 0, got {self.num_shards}")
        if self.num_shards > self.num_stories:
            raise ValueError(f"num_shards must be <= num_stories ({self.num_stories}), got {self.num_shards}")


def _cap(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


@dataclass(frozen=True)
class StoryFacts:
    """Who a story is about and where it happens (drawn first, so questions can be asked of it)."""

    name: str
    kind: str
    place: str
    obj: str


def _draw_facts(rng: random.Random) -> tuple[StoryFacts, str, str, str]:
    c = rng.choice
    name = c(_NAMES)
    kind, he, his = c(_KINDS)
    place = c(_PLACES)
    obj, looks = c(_OBJECTS)
    return StoryFacts(name, kind, place, obj), he, his, looks


def _story_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"tinystories:{seed}:{index}")


def story_facts(seed: int, index: int) -> StoryFacts:
    """The facts of story ``index`` of the corpus with ``seed`` (those :func:`generate_story` tells)."""
    return _draw_facts(_story_rng(seed, index))[0]


@dataclass(frozen=True)
class _Cast:
    """Who and what a story's sentences name: its facts, pronouns, friends and feelings."""

    name: str
    kind: str
    place: str
    obj: str
    looks: str
    he: str
    his: str
    friend: str
    other: str
    bad: str
    good: str


# Every part of a story below draws from the story's one generator, in the order the parts are
# told: changing what a part draws, or the order, changes every story after that draw.
def _draw_cast(rng: random.Random) -> _Cast:
    c = rng.choice
    facts, he, his, looks = _draw_facts(rng)
    friend = c(_FRIENDS)
    other = c([n for n in _NAMES if n != facts.name])
    bad, good = c(_FEELINGS_BAD), c(_FEELINGS_GOOD)
    return _Cast(facts.name, facts.kind, facts.place, facts.obj, looks, he, his, friend, other, bad, good)


def _opening(s: _Cast, rng: random.Random) -> list[str]:
    """Who the hero is and where, the weather, and the treasured object."""
    c = rng.choice
    opening = c((
        f"Once upon a time, there was a {s.kind} named {s.name}. {_cap(s.he)} lived in {s.place}.",
        f"One day, a {s.kind} named {s.name} woke up early in {s.place}.",
        f"{s.name} was a {s.kind} who lived in {s.place}.",
        f"In {s.place}, there lived a {s.kind}. {s.his.capitalize()} name was {s.name}.",
    ))
    weather = c(_WEATHER)
    treasure = c((
        f"{s.name} had a {s.obj}. It was {s.looks}, and {s.name} loved it very much.",
        f"{_cap(s.his)} favorite thing was a {s.obj} that was {s.looks}.",
        f"Every day, {s.name} played with {s.his} {s.obj}.",
    ))
    return [opening, weather, treasure]


def _lost(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    spot1, spot2 = rng.sample(_SPOTS, 2)
    return [
        f"But one morning, the {s.obj} was gone! {s.name} felt very {s.bad}.",
        f'"Where is my {s.obj}?" {s.he} asked. {_cap(s.he)} {c(_ACTIONS)} to look {spot1}, but it was not there.',
        f"Then {s.name} met {s.friend}. \"{c(_SAYINGS)}\" said the friend.",
        f"Together they {c(_ACTIONS)} all around and looked {spot2}. There it was!",
    ]


def _share(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    return [
        f"One day, {s.other} came to play. {s.other} wanted to hold the {s.obj} too.",
        f'"No, it is mine!" said {s.name}. {s.other} felt {s.bad} and walked away.',
        f"{s.name} sat alone. Playing alone was not fun at all. {_cap(s.he)} felt {c(_FEELINGS_BAD)}.",
        f'So {s.name} ran after {s.other} and said, "I am sorry. {c(_SAYINGS)}"',
        f"They took turns with the {s.obj} and laughed all afternoon.",
    ]


def _storm(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    return [
        f"Suddenly, dark clouds came and a big storm began. The wind was loud and {s.name} was {s.bad}.",
        f"{_cap(s.he)} held {s.his} {s.obj} close and hid {c(_SPOTS)}.",
        f'Then {s.friend} came by. "{c(_SAYINGS)}" {c(("said", "called", "whispered"))} the friend.',
        "They waited together and told each other stories until the rain stopped.",
        "When the sun came back, there was a big rainbow in the sky.",
    ]


def _race(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    return [
        f"There was a big race in {s.place}. {s.name} wanted to win it more than anything.",
        f"{s.other} was very fast, and {s.name} felt {s.bad}. \"What if I lose?\" {s.he} asked {s.friend}.",
        f'"{c(_SAYINGS)}" said the friend. "Just do your best."',
        f"{s.name} {c(_ACTIONS)} as fast as {s.he} could. {_cap(s.he)} did not win, but {s.he} finished the race.",
        f"Everyone cheered, and {s.other} gave {s.name} a big hug.",
    ]


def _bake(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    fruit = c(("apple", "cherry", "banana", "berry", "carrot", "lemon", "pumpkin"))
    return [
        f"{s.name} wanted to bake a {fruit} cake for {s.his} mom.",
        f"{_cap(s.he)} got flour, eggs, milk and sugar. But {s.he} forgot the {fruit}s!",
        f"{s.name} felt {s.bad}. Then {s.friend} knocked on the door with a basket of {fruit}s.",
        f'"{c(_SAYINGS)}" said {s.name}. They mixed and stirred and put the cake in the oven.',
        "The kitchen smelled so good. Mom smiled when she took the first bite.",
    ]


def _plant(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    flower = c(("sunflower", "rose", "tulip", "daisy", "bean", "tomato", "pumpkin"))
    days = c(("three", "five", "seven", "ten", "many"))
    return [
        f"{s.name} found a tiny seed and planted it in the ground. \"Grow, little {flower}!\" {s.he} said.",
        f"{_cap(s.he)} gave it water every day. After {days} days, nothing had happened. {s.name} was {s.bad}.",
        f'{_cap(s.friend)} said, "{c(_SAYINGS)} Good things take time."',
        f"The next morning, a little green sprout was there! Soon it became a big {flower}.",
    ]


def _fear(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    dark = c(("the dark", "the loud thunder", "the deep water", "the big dog next door", "the tall slide"))
    return [
        f"{s.name} was afraid of {dark}. Every time {s.he} thought about it, {s.he} felt {s.bad}.",
        f'One night {s.he} told {s.friend}. "{c(_SAYINGS)}" said the friend softly.',
        f"The friend showed {s.name} that {dark} was not so bad after all.",
        f"Step by step, {s.name} became braver. Soon {s.he} was not afraid anymore.",
    ]


def _gift(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    return [
        f"It was {s.other}'s birthday, and {s.name} wanted to give a special gift.",
        f"{_cap(s.he)} had no money, so {s.he} felt {s.bad}. Then {s.he} had an idea.",
        f"{s.name} gave {s.other} the {s.obj}. \"{c(_SAYINGS)}\" said {s.other}, with a big smile.",
        f"Later, {s.other} made {s.name} a card with a drawing of them both. {s.name} kept it forever.",
    ]


def _build(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    thing = c(("sandcastle", "tower of blocks", "snowman", "tree fort", "bridge of sticks", "kite"))
    return [
        f"{s.name} and {s.other} wanted to build a {thing}. They worked hard all morning.",
        f"But then it fell down! {s.name} felt {s.bad} and wanted to stop.",
        f'"{c(_SAYINGS)}" said {s.other}. {s.friend.capitalize()} came to help them.',
        f"They tried again, slowly and carefully. This time the {thing} was even better than before.",
    ]


def _new_friend(s: _Cast, rng: random.Random) -> list[str]:
    c = rng.choice
    return [
        f"One day, {s.name} saw {s.friend} sitting alone {c(_SPOTS)}. The friend looked {s.bad}.",
        f'"Hello! My name is {s.name}. {c(_SAYINGS)}" {s.he} said.',
        f"At first the friend was shy. Then {s.name} showed the {s.obj}, and they began to play.",
        f"They {c(_ACTIONS)} and laughed until the sun went down.",
    ]


# The middle of a story, by plot (the plot itself is drawn from ``_PLOTS``, whose order is part of every story).
_PLOT_TELLERS: dict[str, Callable[[_Cast, random.Random], list[str]]] = {
    "lost": _lost, "share": _share, "storm": _storm, "race": _race, "bake": _bake, "plant": _plant,
    "fear": _fear, "gift": _gift, "build": _build, "new_friend": _new_friend,
}


def _ending(s: _Cast, rng: random.Random) -> list[str]:
    """How the hero feels at the end, and the lesson."""
    c = rng.choice
    feeling = c((
        f"At the end of the day, {s.name} felt {s.good}.",
        f"{s.name} went home feeling {s.good} and tired.",
        f"That night, {s.name} fell asleep with a smile, feeling {s.good}.",
    ))
    # Both lessons are drawn before the line is chosen, even when it is "The end.".
    lesson = c((
        f"{s.name} learned that {c(_LESSONS)}.",
        f"From that day on, {s.name} knew that {c(_LESSONS)}.",
        "The end.",
    ))
    return [feeling, lesson]


def generate_story(seed: int, index: int) -> str:
    """Story ``index`` of the corpus with ``seed`` (deterministic, independent of sharding)."""
    rng = _story_rng(seed, index)
    cast = _draw_cast(rng)
    plot = rng.choice(_PLOTS)
    parts = _opening(cast, rng)
    parts += _PLOT_TELLERS[plot](cast, rng)
    parts += _ending(cast, rng)
    return " ".join(parts)


def generate_corpus(output_path: str, num_stories: int = DEFAULT_NUM_STORIES, seed: int = 0,
                    num_shards: int = DEFAULT_NUM_SHARDS) -> dict:
    """Write ``num_stories`` stories as JSON lines into ``num_shards`` files under ``output_path``.

    Each file is written atomically; the same arguments give byte-identical files.

    Returns:
        ``{"files": [...relative names], "num_stories", "num_shards", "seed", "bytes"}``.
    """
    config = CorpusConfig(num_stories=num_stories, seed=seed, num_shards=num_shards)
    files = []
    total = 0
    for shard in range(config.num_shards):
        lo = shard * config.num_stories // config.num_shards
        hi = (shard + 1) * config.num_stories // config.num_shards
        payload = "".join(
            json.dumps({"id": i, "text": generate_story(config.seed, i)}, ensure_ascii=False) + "\n"
            for i in range(lo, hi)
        ).encode("utf-8")
        name = f"stories-{shard:05d}.jsonl"
        fs.atomic_write(fs.join(output_path, name), payload)
        files.append(name)
        total += len(payload)
    return {"files": files, "num_stories": config.num_stories, "num_shards": config.num_shards,
            "seed": config.seed, "bytes": total}


# Moved from corpus.py: what it defines keeps that name in every hash (and for workers and pickle).
keep_identities(globals(), "marin.experiment.corpus")
