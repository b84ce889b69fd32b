"""The rules web data meets: language identification's accuracy on real text held out from the
tests, and what each rule step costs per document on a generated web corpus.

``python -m benchmarks.bench_rules [--pages N] [--per-language N] [--work DIR]``

Accuracy: paragraphs of the translated manual pages this machine has (``/usr/share/man/<lang>/``,
written by people, shipped by Debian's packages: man-db, apt, dpkg, ...), in every language the
tests do not use (they use English, German, French and Spanish) that has at least 20 such
paragraphs. A paragraph counts when it has at least 12 words and 80 characters, mostly letters,
and less than 60% of its words (of 3 letters or more) are words of the English page of the same
name (a paragraph left untranslated is English). Nothing is read from elsewhere and nothing is kept: the sample is made when the
benchmark runs. Reported per language: paragraphs, the share identified as the page's language,
and the share that ``keep_languages(..., min_score=0.65)`` would keep.

Cost, wall and CPU seconds (documents per CPU second): the language_id step beside a bare loop of
``identify_language``; the heuristics step with FineWeb's rules beside a bare loop of
``fineweb_metrics``; the pii and url_filter steps.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.bench_datakit import Timings, corpus_at
from benchmarks.workfolder import parse_bench_args, work_folder
from marin.processing.attributes import iter_corpus, list_shards, read_summary
from marin.processing.language import LanguageIdConfig, identify_language, language_id_step
from marin.processing.pii import PiiConfig, pii_step
from marin.processing.quality import FINEWEB_RULES, HeuristicsConfig, fineweb_metrics, heuristics_step
from marin.processing.urls import UrlFilterConfig, url_filter_step
from marin.processing.webcorpus import DOCUMENTS_FOLDER

MAN = Path("/usr/share/man")
TEST_LANGUAGES = {"en", "de", "fr", "es"}
MIN_PARAGRAPHS = 20
MIN_SCORE = 0.65
UNTRANSLATED = 0.6
# Folder names that are not the model's codes.
_CODE = {"pt_BR": "pt", "zh_CN": "zh", "zh_TW": "zh"}
_BREAK_MACROS = re.compile(r"^[.'](?:PP|P|LP|SH|SS|TP|IP|HP|RS|RE|sp|br|TH|EX|EE|nf|fi|TQ|SY|YS|UR|UE|ie|el|if|de|\.|ds|nr)\b")
_FONT_MACROS = re.compile(r"^[.'](?:B|I|BR|IR|RB|RI|BI|IB|SM|SB)\s+(.*)$")
# groff's accented letters (\('a is á, \(,c is ç): the letter and a combining mark, composed below.
_ACCENTS = {"'": "\u0301", "`": "\u0300", ":": "\u0308", "^": "\u0302", "~": "\u0303", ",": "\u0327", "o": "\u030a"}
_ESCAPES = [
    (re.compile(r'\\".*$'), ""),
    (re.compile(r"\\\((['`:^~,o])([A-Za-z])"), lambda m: m.group(2) + _ACCENTS[m.group(1)]),
    (re.compile(r"\\f(?:\[[^]]*\]|\(..|.)"), ""), (re.compile(r"\\\*(?:\[[^]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\((?:em|en)"), "-"), (re.compile(r"\\\((?:lq|rq|dq)"), '"'), (re.compile(r"\\\((?:aq|oq|cq)"), "'"),
    (re.compile(r"\\\(..|\\\[[^]]*\]"), ""), (re.compile(r"\\[-e]"), "-"), (re.compile(r"\\[&|^%]"), ""),
    (re.compile(r"\\ "), " "), (re.compile(r"\\(.)"), r"\1"),
]


def _plain(line: str) -> str:
    for pattern, replacement in _ESCAPES:
        line = pattern.sub(replacement, line)
    return unicodedata.normalize("NFC", line)


def man_paragraphs(path: Path) -> list[str]:
    """The prose paragraphs of a (gzipped) manual page: macros dropped, escapes undone."""
    paragraphs, current = [], []
    data = gzip.open(path).read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # older pages are Latin-1
        text = data.decode("latin-1")
    for raw in text.splitlines():
        font = _FONT_MACROS.match(raw)
        if font:
            current.append(_plain(font.group(1).replace('"', "")))
        elif raw.startswith((".", "'")) or not raw.strip():
            if current and (_BREAK_MACROS.match(raw) or not raw.strip() or raw.startswith((".", "'"))):
                paragraphs.append(" ".join(" ".join(current).split()))
                current = []
        else:
            current.append(_plain(raw))
    if current:
        paragraphs.append(" ".join(" ".join(current).split()))
    return [p for p in paragraphs if _is_prose(p)]


def _is_prose(paragraph: str) -> bool:
    letters = sum(c.isalpha() for c in paragraph)
    return len(paragraph.split()) >= 12 and len(paragraph) >= 80 and letters >= 0.6 * len(paragraph)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[^\W\d_]{3,}", text.lower())]


def _untranslated(paragraph: str, english: set[str]) -> bool:
    """Most of its words (of 3 letters or more) are words of the English page: it was left in English."""
    words = _words(paragraph)
    return sum(w in english for w in words) >= UNTRANSLATED * max(len(words), 1)


def held_out_sample(per_language: int) -> dict[str, list[str]]:
    """``{language code: paragraphs}`` of the translated manual pages here (see the module docstring)."""
    english: dict[str, set[str]] = {}
    found: dict[str, list[str]] = defaultdict(list)
    for folder in sorted(p for p in MAN.iterdir() if p.is_dir() and not p.name.startswith("man")):
        code = _CODE.get(folder.name, folder.name.split("_")[0].split(".")[0])
        if code in TEST_LANGUAGES:
            continue
        for page in sorted(folder.glob("man*/*.gz")):
            original = MAN / page.parent.name / page.name
            if str(original) not in english:
                english[str(original)] = set(_words(" ".join(man_paragraphs(original)))) if original.exists() else set()
            for paragraph in man_paragraphs(page):
                if not _untranslated(paragraph, english[str(original)]) and len(found[code]) < per_language:
                    found[code].append(paragraph)
    return {code: paragraphs for code, paragraphs in sorted(found.items()) if len(paragraphs) >= MIN_PARAGRAPHS}


def accuracy(per_language: int) -> None:
    if not MAN.is_dir():
        print(f"\nlanguage identification: no manual pages at {MAN} on this machine; accuracy not measured")
        return
    sample = held_out_sample(per_language)
    print(f"\n== language identification (langid, py3langid) on held-out real text: translated manual pages, "
          f"{len(sample)} languages not used by the tests ==")
    print(f"{'language':<10}{'paragraphs':>11}{'correct':>9}{f'kept at {MIN_SCORE}':>13}   most common mistakes")
    total = correct = kept = 0
    scores = []
    for code, paragraphs in sample.items():
        results = [identify_language(p) for p in paragraphs]
        right = [score for language, score in results if language == code]
        wrong = Counter(language for language, _score in results if language != code).most_common(3)
        scores.extend(right)
        total, correct = total + len(results), correct + len(right)
        kept += sum(1 for s in right if s >= MIN_SCORE)
        print(f"{code:<10}{len(results):>11}{len(right) / len(results):>9.3f}"
              f"{sum(1 for s in right if s >= MIN_SCORE) / len(results):>13.3f}   "
              f"{', '.join(f'{lang} {n}' for lang, n in wrong) or '-'}")
    print(f"{'all':<10}{total:>11}{correct / max(total, 1):>9.3f}{kept / max(total, 1):>13.3f}")
    scores.sort()
    if scores:
        print(f"scores of correct answers: median {scores[len(scores) // 2]:.3f}, 10th percentile "
              f"{scores[len(scores) // 10]:.3f}, lowest {scores[0]:.3f}")


def cost(pages: int, work: str) -> None:
    corpus, truth = corpus_at(work, pages)
    documents = os.path.join(corpus, DOCUMENTS_FOLDER)
    texts = [doc["text"] for _i, doc in iter_corpus(list_shards(documents))]
    n = len(texts)
    identify_language("warm the model up")  # loaded once per process: not a per-document cost
    timings = Timings()
    with timings.measure("language_id step", n):
        language_id_step(LanguageIdConfig(input=documents), os.path.join(work, "lang"))
    with timings.measure("bare identify_language loop", n):
        for text in texts:
            identify_language(text)
    with timings.measure("heuristics step, FineWeb's rules (+ Gopher, C4 metrics)", n):
        heuristics_step(HeuristicsConfig(input=documents, rules=FINEWEB_RULES), os.path.join(work, "fineweb"))
    with timings.measure("bare fineweb_metrics loop", n):
        for text in texts:
            fineweb_metrics(text)
    with timings.measure("pii step (e-mails, IPs, phones)", n):
        pii_step(PiiConfig(input=documents, phones=True), os.path.join(work, "pii"))
    with timings.measure("url_filter step (3 domains, 2 substrings)", n):
        url_filter_step(UrlFilterConfig(input=documents, domains=("shop.example", "a.example", "b.example"),
                                        substrings=("/cart", "casino")), os.path.join(work, "urls"))
    timings.print(f"== rule steps on a generated web corpus: {truth['pages']} pages, {n} documents ==")
    languages = read_summary(os.path.join(work, "lang"))["languages"]
    fineweb = read_summary(os.path.join(work, "fineweb"))
    print(f"languages found: {dict(list(languages.items())[:5])}; FineWeb rules: {fineweb['passed']} of "
          f"{fineweb['documents']} pass, failures {fineweb['failures']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rules")
    parser.add_argument("--pages", type=int, default=2_000, help="pages of the generated corpus")
    parser.add_argument("--per-language", type=int, default=200, help="held-out paragraphs per language (at most)")
    parser.add_argument("--work", default=None, help="folder to keep the generated corpus in (reused)")
    args = parse_bench_args(parser, argv)
    accuracy(args.per_language)
    with work_folder(args.work, "bench-rules-") as work:
        cost(args.pages, work)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
