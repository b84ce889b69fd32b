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


def generate_story(seed: int, index: int) -> str:
    """Story ``index`` of the corpus with ``seed`` (deterministic, independent of sharding)."""
    rng = _story_rng(seed, index)
    c = rng.choice
    facts, he, his, looks = _draw_facts(rng)
    name, kind, place, obj = facts.name, facts.kind, facts.place, facts.obj
    friend = c(_FRIENDS)
    other = c([n for n in _NAMES if n != name])
    bad, good = c(_FEELINGS_BAD), c(_FEELINGS_GOOD)
    plot = c(_PLOTS)
    opening = c((
        f"Once upon a time, there was a {kind} named {name}. {_cap(he)} lived in {place}.",
        f"One day, a {kind} named {name} woke up early in {place}.",
        f"{name} was a {kind} who lived in {place}.",
        f"In {place}, there lived a {kind}. {his.capitalize()} name was {name}.",
    ))
    parts = [opening, c(_WEATHER)]
    parts.append(c((
        f"{name} had a {obj}. It was {looks}, and {name} loved it very much.",
        f"{_cap(his)} favorite thing was a {obj} that was {looks}.",
        f"Every day, {name} played with {his} {obj}.",
    )))
    if plot == "lost":
        spot1, spot2 = rng.sample(_SPOTS, 2)
        parts += [
            f"But one morning, the {obj} was gone! {name} felt very {bad}.",
            f'"Where is my {obj}?" {he} asked. {_cap(he)} {c(_ACTIONS)} to look {spot1}, but it was not there.',
            f"Then {name} met {friend}. \"{c(_SAYINGS)}\" said the friend.",
            f"Together they {c(_ACTIONS)} all around and looked {spot2}. There it was!",
        ]
    elif plot == "share":
        parts += [
            f"One day, {other} came to play. {other} wanted to hold the {obj} too.",
            f'"No, it is mine!" said {name}. {other} felt {bad} and walked away.',
            f"{name} sat alone. Playing alone was not fun at all. {_cap(he)} felt {c(_FEELINGS_BAD)}.",
            f'So {name} ran after {other} and said, "I am sorry. {c(_SAYINGS)}"',
            f"They took turns with the {obj} and laughed all afternoon.",
        ]
    elif plot == "storm":
        parts += [
            f"Suddenly, dark clouds came and a big storm began. The wind was loud and {name} was {bad}.",
            f"{_cap(he)} held {his} {obj} close and hid {c(_SPOTS)}.",
            f'Then {friend} came by. "{c(_SAYINGS)}" {c(("said", "called", "whispered"))} the friend.',
            "They waited together and told each other stories until the rain stopped.",
            "When the sun came back, there was a big rainbow in the sky.",
        ]
    elif plot == "race":
        parts += [
            f"There was a big race in {place}. {name} wanted to win it more than anything.",
            f"{other} was very fast, and {name} felt {bad}. \"What if I lose?\" {he} asked {friend}.",
            f'"{c(_SAYINGS)}" said the friend. "Just do your best."',
            f"{name} {c(_ACTIONS)} as fast as {he} could. {_cap(he)} did not win, but {he} finished the race.",
            f"Everyone cheered, and {other} gave {name} a big hug.",
        ]
    elif plot == "bake":
        fruit = c(("apple", "cherry", "banana", "berry", "carrot", "lemon", "pumpkin"))
        parts += [
            f"{name} wanted to bake a {fruit} cake for {his} mom.",
            f"{_cap(he)} got flour, eggs, milk and sugar. But {he} forgot the {fruit}s!",
            f"{name} felt {bad}. Then {friend} knocked on the door with a basket of {fruit}s.",
            f'"{c(_SAYINGS)}" said {name}. They mixed and stirred and put the cake in the oven.',
            "The kitchen smelled so good. Mom smiled when she took the first bite.",
        ]
    elif plot == "plant":
        flower = c(("sunflower", "rose", "tulip", "daisy", "bean", "tomato", "pumpkin"))
        days = c(("three", "five", "seven", "ten", "many"))
        parts += [
            f"{name} found a tiny seed and planted it in the ground. \"Grow, little {flower}!\" {he} said.",
            f"{_cap(he)} gave it water every day. After {days} days, nothing had happened. {name} was {bad}.",
            f'{_cap(friend)} said, "{c(_SAYINGS)} Good things take time."',
            f"The next morning, a little green sprout was there! Soon it became a big {flower}.",
        ]
    elif plot == "fear":
        dark = c(("the dark", "the loud thunder", "the deep water", "the big dog next door", "the tall slide"))
        parts += [
            f"{name} was afraid of {dark}. Every time {he} thought about it, {he} felt {bad}.",
            f'One night {he} told {friend}. "{c(_SAYINGS)}" said the friend softly.',
            f"The friend showed {name} that {dark} was not so bad after all.",
            f"Step by step, {name} became braver. Soon {he} was not afraid anymore.",
        ]
    elif plot == "gift":
        parts += [
            f"It was {other}'s birthday, and {name} wanted to give a special gift.",
            f"{_cap(he)} had no money, so {he} felt {bad}. Then {he} had an idea.",
            f"{name} gave {other} the {obj}. \"{c(_SAYINGS)}\" said {other}, with a big smile.",
            f"Later, {other} made {name} a card with a drawing of them both. {name} kept it forever.",
        ]
    elif plot == "build":
        thing = c(("sandcastle", "tower of blocks", "snowman", "tree fort", "bridge of sticks", "kite"))
        parts += [
            f"{name} and {other} wanted to build a {thing}. They worked hard all morning.",
            f"But then it fell down! {name} felt {bad} and wanted to stop.",
            f'"{c(_SAYINGS)}" said {other}. {friend.capitalize()} came to help them.',
            f"They tried again, slowly and carefully. This time the {thing} was even better than before.",
        ]
    else:
        parts += [
            f"One day, {name} saw {friend} sitting alone {c(_SPOTS)}. The friend looked {bad}.",
            f'"Hello! My name is {name}. {c(_SAYINGS)}" {he} said.',
            f"At first the friend was shy. Then {name} showed the {obj}, and they began to play.",
            f"They {c(_ACTIONS)} and laughed until the sun went down.",
        ]
    parts.append(c((
        f"At the end of the day, {name} felt {good}.",
        f"{name} went home feeling {good} and tired.",
        f"That night, {name} fell asleep with a smile, feeling {good}.",
    )))
    parts.append(c((
        f"{name} learned that {c(_LESSONS)}.",
        f"From that day on, {name} knew that {c(_LESSONS)}.",
        "The end.",
    )))
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
