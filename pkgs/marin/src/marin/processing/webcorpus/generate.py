"""A deterministic, web-like HTML corpus with planted duplicates, contamination and bad pages.

Output of :func:`generate_web_corpus` (and of the step :func:`web_corpus_step`)::

    <out>/html/site07/000123.html     pages; a page's id is its path below html/ ("site07/000123.html")
    <out>/documents/part-00000.jsonl.gz  the clean text of every page that has one ({id, text, url}),
                                         sorted by id, in contiguous shards: what a perfect extractor gives
    <out>/eval/items.jsonl            the evaluation set ({id, question, answer, text})
    <out>/quality/positive.jsonl.gz   documents to train a quality classifier on: clean articles that
    <out>/quality/negative.jsonl.gz   are not in the corpus, and boilerplate-only pages (see .quality)
    <out>/truth.json                  what was planted (below)

Pages are articles (a title, story paragraphs, intro and outro lines) wrapped in a site's
navigation, cookie banner, sidebar and footer. Planted among them, in shuffled order:

* exact duplicates: the same page bytes at another address;
* near-duplicates: an article with words replaced (see :mod:`marin.processing.webcorpus.articles`) at target Jaccard
  similarities of the 5-word shingles (``near_duplicate_jaccards``), published on another site;
  the real Jaccard of the clean texts is recorded for every pair of pages of one family;
* templated pages: shop pages that repeat a long policy block and differ only in a short story
  (their pairwise Jaccard stays below 0.8: they are not duplicates);
* pages quoting an evaluation item verbatim, re-wrapped to short lines, or embedded mid-paragraph;
* bad pages: empty, whitespace only, binary (a PNG, random bytes), oversized, text without
  article (navigation only), and pages in windows-1252 that declare utf-8 (``wrong_charset``:
  recoverable, so their clean text is in ``documents/``).

``truth.json``: ``{"format", "config", "pages", "documents", "families": {family: [ids]},
"pairs": [{"a", "b", "jaccard", "kind": "exact"|"near", "target"}], "templated": {family:
{"pages", "max_jaccard", "mean_jaccard"}}, "contaminated": [{"id", "item", "mode"}],
"bad_pages": {kind: [ids]}}``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from dataclasses import dataclass

from marin.experiment.data.corpus import generate_story
from marin.processing.attributes import write_jsonl
from marin.processing.dedup.minhash import jaccard, shingle_set
from marin.processing.webcorpus.articles import (
    Article,
    edit_article,
    make_article,
    make_eval_item,
    make_shared_block,
    replacements_for,
    wrap,
)
from marin.processing.webcorpus.quality import negative_documents, positive_documents
from marin.processing.webcorpus.templates import Site, make_site, render_page
from rigging import filesystem as fs

__all__ = ["BAD_PAGE_KINDS", "CONTAMINATION_MODES", "DOCUMENTS_FOLDER", "EVAL_ITEMS_FILE", "HTML_FOLDER", "NEGATIVE_FILE",
           "POSITIVE_FILE", "TRUTH_FILE", "WebCorpusConfig", "generate_web_corpus", "web_corpus_step"]

# The layout of the output (module docstring).
HTML_FOLDER = "html"
DOCUMENTS_FOLDER = "documents"
EVAL_ITEMS_FILE = "eval/items.jsonl"
POSITIVE_FILE = "quality/positive.jsonl.gz"
NEGATIVE_FILE = "quality/negative.jsonl.gz"
TRUTH_FILE = "truth.json"

CONTAMINATION_MODES = ("verbatim", "rewrapped", "embedded")
BAD_PAGE_KINDS = ("empty", "whitespace", "binary", "oversized", "no_text", "wrong_charset")
_NGRAM = 5
_TEMPLATED_SAMPLE_PAIRS = 2000
_ACCENTED = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 a na\u00efve fa\u00e7ade, \u201cquoted\u201d and \u00bd price."


@dataclass(frozen=True)
class WebCorpusConfig:
    """Size, seed and planted content of the generated web corpus."""

    num_pages: int = 1000
    """Article pages, planted duplicates and templated pages included (bad pages come on top)."""
    seed: int = 0
    """The seed; the same config gives byte-identical files."""
    num_sites: int = 12
    """Ordinary sites (each with its own boilerplate)."""
    exact_duplicate_fraction: float = 0.03
    """Share of pages that are byte copies of another page."""
    near_duplicate_fraction: float = 0.06
    """Share of pages that are edited copies of another article."""
    near_duplicate_jaccards: tuple[float, ...] = (0.5, 0.6, 0.7, 0.85, 0.9, 0.95)
    """Target Jaccard similarities of the near-duplicates, used in turn."""
    templated_fraction: float = 0.1
    """Share of pages on templated shop sites."""
    templated_families: int = 3
    """Number of templated shop sites."""
    contaminated_pages: int = 12
    """Pages quoting an evaluation item (modes verbatim, re-wrapped, embedded in turn)."""
    eval_items: int = 60
    """Items in the evaluation set."""
    bad_pages_per_kind: int = 2
    """Pages of each bad kind (see ``BAD_PAGE_KINDS``)."""
    oversized_bytes: int = 1_100_000
    """Size of an oversized page."""
    num_shards: int = 4
    """Shards of ``documents/``."""
    quality_documents: int = 100
    """Documents in each of ``quality/positive`` and ``quality/negative``."""

    def __post_init__(self) -> None:
        if self.num_pages < 10:
            raise ValueError(f"num_pages must be >= 10, got {self.num_pages}")
        for name in ("exact_duplicate_fraction", "near_duplicate_fraction", "templated_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.exact_duplicate_fraction + self.near_duplicate_fraction + self.templated_fraction >= 0.8:
            raise ValueError("duplicate and templated fractions must leave at least 20% original articles, got "
                             f"{self.exact_duplicate_fraction + self.near_duplicate_fraction + self.templated_fraction}")
        if not all(0 < j < 1 for j in self.near_duplicate_jaccards) or not self.near_duplicate_jaccards:
            raise ValueError(f"near_duplicate_jaccards must be values in (0, 1), got {self.near_duplicate_jaccards}")
        for name in ("num_sites", "eval_items", "num_shards"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("templated_families", "contaminated_pages", "bad_pages_per_kind", "quality_documents"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.templated_fraction > 0 and self.templated_families == 0:
            raise ValueError("templated_fraction > 0 needs templated_families >= 1")


@dataclass
class _Page:
    site: int
    data: bytes
    text: str | None
    family: str | None = None
    url_path: str = ""
    page_id: str = ""


def _render(site: Site, article: Article, charset: str = "utf-8") -> str:
    return render_page(site, article.title, list(article.paragraphs), charset=charset)


def _contaminate(article: Article, item: dict, mode: str, rng: random.Random) -> Article:
    paragraphs = list(article.paragraphs)
    slot = rng.randint(1, len(paragraphs) - 2)  # a story: paragraph 0 is the intro, the last the outro
    if mode == "verbatim":
        paragraphs.insert(slot, item["text"])
    elif mode == "rewrapped":
        paragraphs.insert(slot, wrap(item["text"], rng.randint(24, 48)))
    else:
        # Inside a story, between two of its sentences, on the same line.
        host = paragraphs[slot]
        cut = host.find(". ", len(host) // 3)
        cut = cut + 2 if cut >= 0 else 0
        paragraphs[slot] = f"{host[:cut]}{item['text']} {host[cut:]}"
    return Article(article.title, tuple(paragraphs))


def _bad_page(kind: str, index: int, config: WebCorpusConfig, site: Site, rng: random.Random) -> _Page:
    if kind == "empty":
        return _Page(site.number, b"", None)
    if kind == "whitespace":
        return _Page(site.number, b"  \n\t\n   \n", None)
    if kind == "binary":
        if index % 2 == 0:
            return _Page(site.number, b"\x89PNG\r\n\x1a\n" + rng.randbytes(3000), None)
        return _Page(site.number, rng.randbytes(2000), None)
    if kind == "oversized":
        row = "<tr>" + "".join(f"<td>{i}</td>" for i in range(20)) + "</tr>\n"
        filler = row * (config.oversized_bytes // len(row) + 1)
        return _Page(site.number, f"<html><body><table>{filler}</table></body></html>".encode(), None)
    if kind == "no_text":
        return _Page(site.number, render_page(site, "", []).encode("utf-8"), None)
    if kind == "wrong_charset":
        article = make_article(config.seed, 10_000_000 + index)
        article = Article(article.title, (*article.paragraphs[:-1], _ACCENTED, article.paragraphs[-1]))
        # Declares utf-8, is windows-1252: the bytes of the accented letters are not valid utf-8.
        return _Page(site.number, _render(site, article, charset="utf-8").encode("cp1252"), article.text())
    raise ValueError(f"unknown bad page kind {kind!r}")


def _split(config: WebCorpusConfig) -> tuple[int, int, int, int]:
    n = config.num_pages
    exact = round(n * config.exact_duplicate_fraction)
    near = round(n * config.near_duplicate_fraction)
    templated = round(n * config.templated_fraction)
    return n - exact - near - templated, exact, near, templated


def generate_web_corpus(output_path: str, config: WebCorpusConfig) -> dict:
    """Write the corpus (layout in the module docstring) and return its ground truth."""
    # One generator for the whole corpus: the parts below draw from it in turn, so the order of
    # the parts, and of the draws in each, is part of the output.
    rng = random.Random(f"webcorpus:{config.seed}")
    sites = [make_site(config.seed, i) for i in range(config.num_sites)]
    n_orig, n_exact, n_near, n_templated = _split(config)
    articles = [make_article(config.seed, i) for i in range(n_orig)]
    pages: list[_Page] = [_Page(rng.randrange(config.num_sites), b"", None, family=f"a{i}") for i in range(n_orig)]
    copies = _exact_copies(config, n_orig, n_exact, rng)
    variants, targets = _near_duplicates(config, articles, n_near, rng)
    items = [make_eval_item(config.seed, i) for i in range(config.eval_items)]
    copied = {_family_source(page) for page in [*copies, *(p for p, _ in variants)]}
    contaminated = _contaminate_originals(config, articles, items, copied, rng)
    _render_families(sites, articles, pages, copies, variants)
    shops, templated = _templated_pages(config, n_templated, rng)
    bad = _bad_pages(config, sites, rng)
    everything = [*pages, *copies, *(p for p, _ in variants), *(p for ps in templated.values() for p in ps),
                  *(p for ps in bad.values() for p in ps)]
    _publish_pages(output_path, everything, [*sites, *shops], rng)
    num_documents = _write_documents(output_path, everything, config.num_shards)
    write_jsonl(fs.join(output_path, EVAL_ITEMS_FILE), items)
    write_jsonl(fs.join(output_path, POSITIVE_FILE), positive_documents(config.seed, config.quality_documents))
    write_jsonl(fs.join(output_path, NEGATIVE_FILE), negative_documents(config.seed, config.quality_documents))
    truth = _truth(config, everything, pages, copies, variants, targets, templated, contaminated, bad)
    truth["documents"] = num_documents
    fs.atomic_write(fs.join(output_path, TRUTH_FILE), json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return truth


def _family_source(page: _Page) -> int:
    """The index of the original article a page is a copy of (its family is ``a<index>``)."""
    return int((page.family or "a0")[1:])


def _exact_copies(config: WebCorpusConfig, n_orig: int, n_exact: int, rng: random.Random) -> list[_Page]:
    """Pages, not yet rendered, that will be byte copies of an original (on a site of their own)."""
    copies = []
    for _ in range(n_exact):
        src = rng.randrange(n_orig)
        copies.append(_Page(rng.randrange(config.num_sites), b"", None, family=f"a{src}"))
    return copies


def _near_duplicates(config: WebCorpusConfig, articles: list[Article], n_near: int,
                     rng: random.Random) -> tuple[list[tuple[_Page, Article]], dict[int, float]]:
    """Edited copies of originals with their pages (not yet rendered), and each page's target Jaccard by ``id``."""
    targets: dict[int, float] = {}
    variants: list[tuple[_Page, Article]] = []
    for j in range(n_near):
        src = rng.randrange(len(articles))
        target = config.near_duplicate_jaccards[j % len(config.near_duplicate_jaccards)]
        variant = _near_variant(articles[src], target, config.seed, j)
        page = _Page(rng.randrange(config.num_sites), b"", variant.text(), family=f"a{src}")
        targets[id(page)] = target
        variants.append((page, variant))
    return variants, targets


def _near_variant(article: Article, target: float, seed: int, j: int) -> Article:
    """``article`` with words replaced so that its shingles' Jaccard to the original is about ``target``."""
    original = shingle_set(article.text(), _NGRAM)
    count = replacements_for(target, original.size, _NGRAM)
    variant = edit_article(article, count, _NGRAM, random.Random(f"webcorpus-edit:{seed}:{j}"))
    got = jaccard(original, shingle_set(variant.text(), _NGRAM))
    if abs(got - target) > 0.01:
        # One proportional correction: the formula's shingle count ignores repeated phrases.
        count = max(1, round(count * ((1 - target) / (1 + target)) / max((1 - got) / (1 + got), 1e-9)))
        variant = edit_article(article, count, _NGRAM, random.Random(f"webcorpus-edit:{seed}:{j}"))
    return variant


def _contaminate_originals(config: WebCorpusConfig, articles: list[Article], items: list[dict], copied: set[int],
                           rng: random.Random) -> list[tuple[int, str, str]]:
    """Plant evaluation items in originals (in ``articles``, in place); returns ``(article, item id, mode)``.

    Only originals that have no copies are used, so every quote has one known page.
    """
    free = [i for i in range(len(articles)) if i not in copied]
    contaminated = []
    for j, src in enumerate(rng.sample(free, min(config.contaminated_pages, len(free)))):
        mode = CONTAMINATION_MODES[j % len(CONTAMINATION_MODES)]
        item = items[(j * 7) % len(items)]
        articles[src] = _contaminate(articles[src], item, mode, random.Random(f"webcorpus-quote:{config.seed}:{j}"))
        contaminated.append((src, item["id"], mode))
    return contaminated


def _render_families(sites: list[Site], articles: list[Article], pages: list[_Page], copies: list[_Page],
                     variants: list[tuple[_Page, Article]]) -> None:
    """Fill in the bytes and clean text of the originals, their exact copies and their near-duplicates."""
    for i, page in enumerate(pages):
        page.data = _render(sites[page.site], articles[i]).encode("utf-8")
        page.text = articles[i].text()
    for page in copies:
        src = _family_source(page)
        page.data, page.text = pages[src].data, pages[src].text
    for page, variant in variants:
        page.data = _render(sites[page.site], variant).encode("utf-8")


def _templated_pages(config: WebCorpusConfig, n_templated: int,
                     rng: random.Random) -> tuple[list[Site], dict[str, list[_Page]]]:
    """The templated shop sites, and their pages by family: a long shared block and a short story each."""
    templated: dict[str, list[_Page]] = {}
    shops = [make_site(config.seed, config.num_sites + f,
                       shared_block=make_shared_block(config.seed, f, 13 + f % 4))
             for f in range(config.templated_families)]
    for j in range(n_templated):
        f = j % max(config.templated_families, 1)
        story_words = generate_story(config.seed, 20_000_000 + j).split(" ")
        short = " ".join(story_words[:rng.randint(45, 80)])
        article = Article(f"Handmade toy no. {j}: {' '.join(story_words[:4])}", (short,))
        page = _Page(shops[f].number, _render(shops[f], article).encode("utf-8"), article.text(shops[f].shared_block))
        templated.setdefault(f"shop{f}", []).append(page)
    return shops, templated


def _bad_pages(config: WebCorpusConfig, sites: list[Site], rng: random.Random) -> dict[str, list[_Page]]:
    """``bad_pages_per_kind`` pages of each bad kind, by kind, each on a site drawn for it."""
    bad: dict[str, list[_Page]] = {}
    for kind in BAD_PAGE_KINDS:
        for k in range(config.bad_pages_per_kind):
            bad.setdefault(kind, []).append(_bad_page(kind, k, config, sites[rng.randrange(config.num_sites)], rng))
    return bad


def _publish_pages(output_path: str, everything: list[_Page], all_sites: list[Site], rng: random.Random) -> None:
    """Give every page a shuffled number, hence its id and URL, and write its bytes under ``html/``."""
    numbers = list(range(len(everything)))
    rng.shuffle(numbers)
    for page, number in zip(everything, numbers, strict=True):
        page.page_id = f"site{page.site:02d}/{number:06d}.html"
        page.url_path = f"https://{all_sites[page.site].domain}/{number:06d}.html"
        fs.atomic_write(fs.join(output_path, HTML_FOLDER, page.page_id), page.data, durable=False)


def _write_documents(output_path: str, everything: list[_Page], num_shards: int) -> int:
    """Write the clean text of every page that has one, sorted by id, in contiguous shards; returns their count."""
    documents = sorted((p for p in everything if p.text is not None), key=lambda p: p.page_id)
    for shard in range(num_shards):
        lo, hi = shard * len(documents) // num_shards, (shard + 1) * len(documents) // num_shards
        write_jsonl(fs.join(output_path, DOCUMENTS_FOLDER, f"part-{shard:05d}.jsonl.gz"),
                    ({"id": p.page_id, "text": p.text, "url": p.url_path} for p in documents[lo:hi]))
    return len(documents)


def _truth(config: WebCorpusConfig, everything: list[_Page], pages: list[_Page], copies: list[_Page],
           variants: list[tuple[_Page, Article]], targets: dict[int, float],
           templated: dict[str, list[_Page]], contaminated: list[tuple[int, str, str]],
           bad: dict[str, list[_Page]]) -> dict:
    families: dict[str, list[_Page]] = {}
    for page in [*pages, *copies, *(p for p, _ in variants)]:
        families.setdefault(page.family or "", []).append(page)
    pairs = []
    for members in families.values():
        if len(members) < 2:
            continue
        sets = {id(p): shingle_set(p.text or "", _NGRAM) for p in members}
        for a, b in itertools.combinations(sorted(members, key=lambda p: p.page_id), 2):
            similarity = jaccard(sets[id(a)], sets[id(b)])
            exact = a.data == b.data
            pairs.append({"a": a.page_id, "b": b.page_id, "jaccard": round(similarity, 6),
                          "kind": "exact" if exact else "near",
                          "target": None if exact else targets.get(id(b), targets.get(id(a)))})
    shops = {}
    for name, members in templated.items():
        sets = [shingle_set(p.text or "", _NGRAM) for p in members]
        sample_rng = random.Random(f"webcorpus-templated:{config.seed}:{name}")
        combos = [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))]
        sample = combos if len(combos) <= _TEMPLATED_SAMPLE_PAIRS else sample_rng.sample(combos, _TEMPLATED_SAMPLE_PAIRS)
        values = [jaccard(sets[i], sets[j]) for i, j in sample]
        shops[name] = {"pages": sorted(p.page_id for p in members),
                       "max_jaccard": round(max(values, default=0.0), 6),
                       "mean_jaccard": round(sum(values) / len(values), 6) if values else 0.0}
    return {
        "format": "marin.webcorpus/v1",
        "config": dataclasses.asdict(config),
        "pages": len(everything),
        "families": {name: sorted(p.page_id for p in members) for name, members in sorted(families.items())
                     if len(members) > 1},
        "pairs": sorted(pairs, key=lambda p: (p["a"], p["b"])),
        "templated": shops,
        "contaminated": sorted(({"id": pages[src].page_id, "item": item, "mode": mode}
                                for src, item, mode in contaminated), key=lambda c: c["id"]),
        "bad_pages": {kind: sorted(p.page_id for p in members) for kind, members in bad.items()},
    }


def web_corpus_step(config: WebCorpusConfig, output_path: str) -> None:
    """Step function: write the generated web corpus and its ground truth."""
    truth = generate_web_corpus(output_path, config)
    print(f"web corpus: {truth['pages']} pages, {truth['documents']} documents, {len(truth['pairs'])} planted pairs")
