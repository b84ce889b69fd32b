"""FineWeb's quality rules and PII redaction beside datatrove's, on the same documents.

``python -m benchmarks.bench_rules_peers [--pages N] [--work DIR] [--tutorial]`` (``make bench-peers``: datatrove
lives only in ``.venv-bench``), on the generated web corpus of :mod:`benchmarks.bench_datakit`:
its documents (clean articles), its boilerplate pages (the quality classifier's negatives), and
the whole text of its first ``--whole-pages`` HTML pages (menus, footers and all: resiliparse
without its main-content detection, as a careless extractor would give them), and ``--variants``
pages made from articles to land near each FineWeb rule's bar (:func:`variants`). With
``--tutorial``, on the web tutorial's documents instead (:func:`tutorial_texts`).

* FineWeb: our heuristics with FineWeb's rules against datatrove's ``FineWebQualityFilter``
  (defaults, the thresholds FineWeb used). datatrove stops at the first rule a document fails, so
  ours are charged in the same order (line punctuation, short lines, duplicated-line characters,
  list-like); and each rule alone (datatrove's others switched off by their options), so the
  later rules are compared on every document too. Reported: documents each rule removes for each,
  and documents decided differently.
  datatrove's English words come from NLTK's ``word_tokenize``, whose sentence splitter (punkt)
  needs data downloaded at first use, which this machine cannot do: here its words are NLTK's
  word tokenizer over sentences split after ``. ! ?`` and a space, as punkt mostly splits them.
* PII: e-mail and IP addresses planted in the documents (public and private, with look-alikes such
  as versions ``1.2.3.4.5`` and addresses at reserved domains), replaced by ours and by datatrove's
  ``PIIFormatter``; reported: replacements each made, and documents where they differ in number.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_datakit import corpus_at
from marin.processing.attributes import iter_corpus, list_shards, read_records
from marin.processing.pii import PiiConfig, redact
from marin.processing.quality import FINEWEB_RULES, HeuristicsConfig, evaluate_heuristics
from marin.processing.webcorpus import DOCUMENTS_FOLDER, HTML_FOLDER, NEGATIVE_FILE

_ORDER = ("fineweb_line_punctuation", "fineweb_short_lines", "fineweb_duplicate_line_chars", "fineweb_list_like")
_THEIRS = {"line_punct_ratio": _ORDER[0], "short_line_ratio": _ORDER[1], "char_dup_ratio": _ORDER[2],
           "list_ratio": _ORDER[3], "empty": _ORDER[0]}


def _nltk_words(text: str, _language: Any = None) -> list[str]:
    from nltk.tokenize import NLTKWordTokenizer  # the benchmark environment's NLTK

    tokenizer = NLTKWordTokenizer()
    return [w for sentence in re.split(r"(?<=[.!?])\s+", text) if sentence for w in tokenizer.tokenize(sentence)]


def _texts(corpus: str, pages: int) -> list[str]:
    """Clean articles, boilerplate pages, and every text of ``pages`` HTML pages (menus, footers and
    all, as an extractor that keeps everything would give them)."""
    from resiliparse.extract.html2text import extract_plain_text

    texts = [doc["text"] for _i, doc in iter_corpus(list_shards(os.path.join(corpus, DOCUMENTS_FOLDER)))]
    texts += [r["text"] for r in read_records(os.path.join(corpus, NEGATIVE_FILE))]
    for page in sorted(Path(corpus, HTML_FOLDER).rglob("*.html"))[:pages]:
        html = page.read_bytes().decode("utf-8", "replace")
        if html.strip():
            texts.append(extract_plain_text(html, main_content=False))
    return texts


_MENU = ("Home", "About us", "Contact", "Shop", "Cart", "Log in", "Privacy policy", "Terms of use", "Blog",
         "Careers", "Newsletter", "Follow us on social media", "Share this page", "Back to top")


def variants(texts: list[str], count: int, seed: int = 0) -> list[str]:
    """Pages made from ``count`` articles to land near each rule's bar: terminal punctuation taken off
    most lines, menus of short lines added, lines repeated, lines cut into a few words each."""
    rng = random.Random(seed)
    made = []
    for text in texts[:count]:
        lines = [line for line in text.split("\n") if line.strip()]
        kind = rng.randrange(4)
        if kind == 0:
            keep = rng.uniform(0.0, 0.3)
            lines = [line if rng.random() < keep else line.rstrip(".!?") for line in lines]
        elif kind == 1:
            lines = [rng.choice(_MENU) for _ in range(rng.randint(0, 4 * len(lines)))] + lines
        elif kind == 2:
            for _ in range(rng.randint(0, 2)):
                lines.append(rng.choice(lines + list(_MENU))[:rng.randint(5, 60)])
                lines.insert(rng.randrange(len(lines)), lines[-1])
        else:
            size = rng.randint(2, 6)
            words = " ".join(lines).split()
            lines = [" ".join(words[i:i + size]) for i in range(0, len(words), size)]
        made.append("\n".join(lines))
    return made


# datatrove's options that switch each of its rules off, so one rule can be compared alone.
_OFF = {"fineweb_line_punctuation": {"line_punct_thr": 0.0}, "fineweb_short_lines": {"short_line_thr": 1.0},
        "fineweb_duplicate_line_chars": {"char_duplicates_ratio": 1.0},
        "fineweb_list_like": {"new_line_ratio": float("inf")}}


def _alone(rule: str) -> dict[str, float]:
    return {k: v for other, off in _OFF.items() if other != rule for k, v in off.items()}


GENERATED = "the generated web corpus (articles, boilerplate pages, whole pages, variants)"


def fineweb(texts: list[str], what: str = GENERATED) -> None:
    import datatrove.pipeline.filters.fineweb_quality_filter as theirs_module
    from datatrove.data import Document

    theirs_module.split_into_words = _nltk_words  # type: ignore[attr-defined]  (see the module docstring)
    texts = [t for t in texts if t.strip()]  # datatrove drops a page with no line before any rule
    started = time.process_time()
    ours = [evaluate_heuristics(text, HeuristicsConfig(input="", rules=FINEWEB_RULES))["failed"] for text in texts]
    ours_cpu = time.process_time() - started
    peer = theirs_module.FineWebQualityFilter()
    started = time.process_time()
    theirs = [peer.filter(Document(text=text, id=str(i))) for i, text in enumerate(texts)]
    theirs_cpu = time.process_time() - started
    first = [next((rule for rule in _ORDER if rule in failed), None) for failed in ours]
    theirs_first = [None if verdict is True else _THEIRS[verdict[1]] for verdict in theirs]
    print(f"\n== FineWeb quality rules on {len(texts)} documents of {what} ==")
    print(f"{'rule':<34}{'first failed: ours':>20}{'datatrove':>11}{'alone: ours':>13}{'datatrove':>11}{'differ':>8}")
    for rule in _ORDER:
        alone = theirs_module.FineWebQualityFilter(**_alone(rule))
        theirs_alone = [alone.filter(Document(text=t, id=str(i))) is not True for i, t in enumerate(texts)]
        ours_alone = [rule in failed for failed in ours]
        differ = sum(a != b for a, b in zip(ours_alone, theirs_alone, strict=True))
        print(f"{rule:<34}{first.count(rule):>20}{theirs_first.count(rule):>11}{sum(ours_alone):>13}"
              f"{sum(theirs_alone):>11}{differ:>8}")
    print(f"{'kept':<34}{first.count(None):>20}{theirs_first.count(None):>11}")
    differ = sum((a is None) != (b is None) for a, b in zip(first, theirs_first, strict=True))
    print(f"documents kept by one and removed by the other: {differ}")
    print(f"CPU: ours {ours_cpu:.2f} s (with every Gopher and C4 metric), datatrove {theirs_cpu:.2f} s")


_SHARED = ("jane.doe@mail.example.co.uk", "bob@uni.edu", "a.b@c.io", "8.8.8.8,", "151.101.1.69.", "192.168.1.1",
           "10.0.0.254", "127.0.0.1", "203.0.113.5", "(x@y.org)")
_LOOKALIKES = ("docs@example.org", "version 1.2.3.4.5")


def _planted(texts: list[str], things: tuple[str, ...], seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    planted = []
    for text in texts:
        words = text.split(" ")
        for _ in range(rng.randint(0, 4)):
            words.insert(rng.randint(0, len(words)), rng.choice(things))
        planted.append(" ".join(words))
    return planted


def pii(texts: list[str]) -> None:
    from datatrove.pipeline.formatters.pii import PIIFormatter

    peer = PIIFormatter()
    config = PiiConfig(input="")
    for label, things in (("shared addresses", _SHARED), ("look-alikes", _LOOKALIKES)):
        planted = _planted(texts, things)
        ours = [redact(t, config)[1] for t in planted]
        theirs = []
        for text in planted:
            emails = peer.emails_replacer.regex.findall(text)
            ips = [m for m in peer.ip_replacer.regex.findall(text) if peer.ip_replacer.validator(m)]
            theirs.append({"emails": len(emails), "ips": len(ips)})
        print(f"\n== PII on {len(planted)} documents with planted {label}: {', '.join(things)} ==")
        for kind in ("emails", "ips"):
            a = sum(c.get(kind, 0) for c in ours)
            b = sum(c[kind] for c in theirs)
            differ = sum(1 for x, y in zip(ours, theirs, strict=True) if x.get(kind, 0) != y[kind])
            print(f"{kind:<8} replaced: ours {a}, datatrove {b}; documents that differ: {differ}")
    print("(look-alikes: ours keeps addresses at domains reserved for documentation and does not take 1.2.3.4 "
          "out of a version 1.2.3.4.5; datatrove replaces both)")


def tutorial_texts(work: str) -> list[str]:
    """The documents of the web tutorial (``experiments/datakit/warc_pipeline.py``, at the size
    ``EXPERIMENTS_SCALE`` says): its crawl, with other languages and PII planted, read back from WARC
    by ``html_to_text``: the documents its rules step judges, built here in this process."""
    # Imported here: only --tutorial builds the experiment (and imports its graph).
    from experiments.datakit.warc_pipeline import text
    from fray.inprocess import InProcessClient
    from marin.execution.core.lazy import lower
    from marin.execution.run.runner import StepRunner
    from marin.execution.store.step_record import StepRecord

    result = StepRunner(prefix=os.path.join(work, "store"), client=InProcessClient(), strict_env=False).run(
        [lower(text)])
    assert result.ok, [(s.name, s.error) for s in result.failed]
    folder = StepRecord(result.by_name(text.name).output_path).files_folder()
    return [doc["text"] for _i, doc in iter_corpus(list_shards(folder))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_rules_peers")
    parser.add_argument("--pages", type=int, default=2_000, help="pages of the generated corpus")
    parser.add_argument("--whole-pages", type=int, default=2_000, help="HTML pages added with all their text")
    parser.add_argument("--variants", type=int, default=2_000, help="pages made to land near the rules' bars")
    parser.add_argument("--work", default=None, help="folder to keep the generated corpus in (reused)")
    parser.add_argument("--tutorial", action="store_true",
                        help="the web tutorial's documents instead (experiments/datakit/warc_pipeline.py)")
    args = parser.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory(prefix="bench-rules-peers-") as scratch:
        if args.tutorial:
            texts = tutorial_texts(args.work or scratch)
            fineweb(texts, "the web tutorial (experiments/datakit/warc_pipeline.py, read from its WARC)")
            pii(texts)
            return
        corpus, _truth = corpus_at(args.work or scratch, args.pages)
        texts = _texts(corpus, args.whole_pages)
        texts += variants(texts, args.variants)
        fineweb(texts)
        pii(texts)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
