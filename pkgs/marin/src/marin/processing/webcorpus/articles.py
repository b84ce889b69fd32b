"""Article texts of the generated web corpus, their near-duplicate edits, and evaluation items.

* :func:`make_article`: a title and paragraphs: an intro line, two to five stories of
  :func:`marin.experiment.data.corpus.generate_story` (one per paragraph), an outro line.
* :func:`edit_article`: a near-duplicate at a target Jaccard similarity. Replacing one word by a
  word found nowhere else changes the ``ngram`` shingles that contain it; with replacements at
  least ``ngram`` words apart, ``k`` of them in a text of ``S`` distinct shingles give about
  ``(S - ngram k) / (S + ngram k)``. The caller measures the real value on the final texts.
* :func:`make_shared_block`: the block a templated site repeats on every page (shop policies).
* :func:`make_eval_item`: an evaluation question with its answer, in a vocabulary the stories do
  not use, so clean articles never share a 13-word run with one by chance.
* :func:`wrap`: text re-wrapped to lines of at most ``width`` characters.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from marin.experiment.data.corpus import generate_story, story_facts

__all__ = ["Article", "edit_article", "make_article", "make_eval_item", "make_shared_block", "replacements_for", "wrap"]

_INTROS = (
    "This week our readers sent in another bedtime story.", "Here is a tale for the weekend.",
    "Our story corner is back with new adventures.", "A reader from the valley shared these stories with us.",
    "Grab a blanket: it is story time again.", "These stories were read aloud at the library on Saturday.",
    "Teachers asked us for more stories, so here they are.", "Story night at the community hall was full again.",
)
_OUTROS = (
    "Send us your own stories and we will print the best ones.", "Which story did you like best? Tell us.",
    "More stories will follow next week.", "Thank you to every family who wrote in.",
    "Share this page with a friend who loves stories.", "The story corner returns on Monday.",
)
_SHOP_SENTENCES = (
    "Orders placed before noon ship the same business day from our workshop in {place}.",
    "Every order over {n} dollars ships free of charge within the country.",
    "Returns are accepted within {m} days of delivery if the item is unused and in its original box.",
    "Our team of {n} craftspeople has made wooden toys by hand since {year}.",
    "All paints and varnishes we use are water based and tested for children under three.",
    "Gift wrapping is available at checkout for a small fee, with a handwritten card.",
    "Sign up for our newsletter to hear about new toys, seasonal sales and workshop visits.",
    "Customer service answers questions by email on weekdays between nine and five.",
    "We plant one tree for every order through our partnership with a local forestry group.",
    "Wholesale prices are available for schools, libraries and day care centres on request.",
    "Please allow {m} extra days for delivery during the holiday season.",
    "Each piece is sanded by hand and may differ slightly from the photographs shown.",
    "Payment is accepted by card, bank transfer or store voucher; vouchers never expire.",
    "Replacement parts for older toys can be ordered by writing to our repair desk.",
    "Visit our workshop in {place} on the first Saturday of each month for a guided tour.",
    "Reviews from customers are shown unedited, and we answer every one of them.",
)
_PLACES = ("Ashford", "Bramblewood", "Cedar Falls", "Dunmore", "Elmstead", "Foxley", "Glenbrook", "Hollowmere")
_EVAL_TEMPLATES = (
    ("A cargo ship leaves port {a} carrying {n} containers and unloads {m} at each of {k} harbours; how many "
     "containers remain aboard when it reaches the final harbour?", "{r1}"),
    ("Which chemical element with atomic number {n} is commonly used in the manufacture of {use}?", "{elem}"),
    ("In a survey of {n} commuters in {city}, {m} percent cycled to work. How many commuters cycled?", "{r2}"),
    ("Evaluate the integral of {k} times x squared from zero to {a} and give the exact value.", "{r3}"),
    ("What is the capital city of the fictional republic of {land}?", "{city}"),
    ("The volcanologist {first} {last} measured {n} tremors at {peak} during {month}; estimate the daily mean "
     "assuming a thirty day month and report it rounded to one decimal.", "{r4}"),
    ("Translate the phrase velvet lantern quarantine into the constructed language {land}ese.", "{land}ese-{n}"),
    ("Define thermodynamic entropy for a reversible isothermal process at {n} kelvin.", "heat over temperature"),
)
_CITIES = ("Quorvale", "Zentrix", "Morwick Harbor", "Ilvandor", "Castellon Bay", "Pyrmont Ridge", "Tarquin")
_LANDS = ("Veldoria", "Estmarch", "Qantaris", "Borovia", "Lunethra", "Sarkhan", "Oberlund")
_ELEMENTS = (("tungsten", "filament lamps"), ("lithium", "rechargeable batteries"), ("silicon", "microchips"),
             ("titanium", "aircraft frames"), ("cobalt", "blue pigments"), ("platinum", "catalytic converters"))
_MONTHS = ("January", "March", "June", "August", "October", "December")
_PEAKS = ("Mount Kessarin", "Cerro Vantablo", "Hekmar Ridge", "Orvald Caldera")
_SURNAMES = ("Okonkwo", "Lindqvist", "Takahashi", "Moreau", "Castellanos", "Novak", "Haddad", "Fairweather")
_FIRSTS = ("Adaeze", "Bjorn", "Keiko", "Lucien", "Marisol", "Pavel", "Rania", "Wendell")


@dataclass(frozen=True)
class Article:
    """An article: its title and paragraphs (a paragraph may hold line breaks)."""

    title: str
    paragraphs: tuple[str, ...]

    def text(self, shared_block: str = "") -> str:
        """The article's clean text as an extractor gives it: title, paragraphs, shared block, one per line."""
        lines = [self.title, *self.paragraphs]
        if shared_block:
            lines.extend(shared_block.split("\n\n"))
        return "\n".join(lines)


def make_article(seed: int, index: int) -> Article:
    """Article ``index`` of the corpus with ``seed``: stories ``8 * index ...`` of that seed."""
    rng = random.Random(f"webcorpus-article:{seed}:{index}")
    first = 8 * index
    facts = story_facts(seed, first)
    title = rng.choice((f"{facts.name} and the {facts.obj}", f"A story about {facts.name}",
                        f"{facts.name} in {facts.place}", f"The {facts.obj} of {facts.name}"))
    stories = [generate_story(seed, first + i) for i in range(rng.randint(2, 5))]
    return Article(title=f"{title} (no. {index})", paragraphs=(rng.choice(_INTROS), *stories, rng.choice(_OUTROS)))


def _nonce(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(9))


def replacements_for(target: float, shingles: int, ngram: int) -> int:
    """Words to replace in a text of ``shingles`` distinct shingles for a Jaccard of about ``target``."""
    if not 0 < target < 1:
        raise ValueError(f"target must be in (0, 1), got {target}")
    return max(1, round(shingles * (1 - target) / (ngram * (1 + target))))


def edit_article(article: Article, replacements: int, ngram: int, rng: random.Random) -> Article:
    """A copy of ``article`` with ``replacements`` words, at least ``ngram`` words apart, replaced
    by words found nowhere else (fewer if the text has too few slots)."""
    tokens = [p.split(" ") for p in article.paragraphs]
    # Candidate slots at least `ngram` tokens apart (every token holds at least one word).
    spaced: list[tuple[int, int]] = []
    flat, last = 0, None
    for pi, para in enumerate(tokens):
        for ti, tok in enumerate(para):
            if tok.isalpha() and (last is None or flat - last >= ngram):
                spaced.append((pi, ti))
                last = flat
            flat += 1
    for pi, ti in sorted(rng.sample(spaced, min(replacements, len(spaced)))):
        tokens[pi][ti] = _nonce(rng)
    return Article(article.title, tuple(" ".join(para) for para in tokens))


def make_shared_block(seed: int, family: int, sentences: int) -> str:
    """The policy text a templated shop repeats on every page (paragraphs split by blank lines)."""
    rng = random.Random(f"webcorpus-shared:{seed}:{family}")
    chosen = rng.sample(_SHOP_SENTENCES, min(sentences, len(_SHOP_SENTENCES)))
    filled = [s.format(place=rng.choice(_PLACES), n=rng.randint(12, 90), m=rng.randint(7, 45),
                       year=rng.randint(1950, 2010)) for s in chosen]
    return "\n\n".join(" ".join(filled[i:i + 3]) for i in range(0, len(filled), 3))


def make_eval_item(seed: int, index: int) -> dict[str, str]:
    """Evaluation item ``index``: ``{"id", "question", "answer", "text"}`` (text is both)."""
    rng = random.Random(f"webcorpus-eval:{seed}:{index}")
    template, answer = _EVAL_TEMPLATES[index % len(_EVAL_TEMPLATES)]
    n, m, k, a = rng.randint(40, 900), rng.randint(3, 30), rng.randint(2, 9), rng.randint(2, 12)
    elem, use = rng.choice(_ELEMENTS)
    slots = dict(a=a, n=n, m=m, k=k, use=use, elem=elem, city=rng.choice(_CITIES), land=rng.choice(_LANDS),
                 first=rng.choice(_FIRSTS), last=rng.choice(_SURNAMES), peak=rng.choice(_PEAKS),
                 month=rng.choice(_MONTHS), r1=str(n - m * k), r2=str(n * m // 100),
                 r3=f"{k} times {a} cubed over three", r4=f"{n / 30:.1f}")
    question, answer = template.format(**slots), answer.format(**slots)
    return {"id": f"eval-{index:05d}", "question": question, "answer": answer, "text": f"{question} {answer}"}


def wrap(text: str, width: int) -> str:
    """``text`` re-wrapped to lines of at most ``width`` characters (longer words get a line each)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return "\n".join(lines)
