"""Heuristic quality rules of Gopher (Rae et al. 2021, appendix A), C4 (Raffel et al. 2020, 2.2) and
FineWeb (Penedo et al. 2024, 3.3), as an attribute step: every document gets its metrics, the rules
it fails, and ``passed``.

Definitions (implemented from the papers' descriptions; defaults are their published values):

* tokens: whitespace-separated pieces of the text; words: :func:`marin.processing.text.words`;
  lines: the non-blank lines; paragraphs: blocks separated by blank lines.
* ``word_count``: tokens in ``[min_words, max_words]``; ``mean_word_length``: mean characters per
  token in ``[3, 10]``; ``symbol_ratio``: ``#`` and ellipses (``...``, ``…``) per token <= 0.1 each;
  ``bullet_lines``: share of lines starting with a bullet <= 0.9; ``ellipsis_lines``: share of lines
  ending with an ellipsis <= 0.3; ``alpha_words``: share of tokens with a letter >= 0.8;
  ``stop_words``: at least 2 of *the, be, to, of, and, that, have, with* among the words.
* repetition: ``duplicate_lines`` / ``duplicate_paragraphs``: share of lines (paragraphs) equal to an
  earlier one <= 0.3, and their share of characters <= 0.2 (``*_chars``); ``top_ngram`` for n = 2, 3, 4:
  characters of all occurrences of the most frequent word n-gram over the characters of all
  words <= 0.20, 0.18, 0.16; ``duplicate_ngram`` for n = 5 ... 10: characters of the words covered by
  any n-gram occurring more than once (every occurrence) <= 0.15 ... 0.10.
* C4 keeps only lines ending in terminal punctuation (``. ! ? "``), of at least 5 words, not
  mentioning javascript; here as document rules: ``c4_kept_lines``: share of characters in such lines
  >= ``c4_min_kept_fraction`` (this project's document-level reading of the line rule); ``c4_sentences``:
  at least 3 sentences in those lines; ``c4_lorem_ipsum`` and ``c4_curly_brace``: the page has none.
* FineWeb (:mod:`marin.processing.quality.fineweb`, thresholds as datatrove's ``FineWebQualityFilter``
  has them): ``fineweb_line_punctuation``: share of lines ending in a sentence terminal >= 0.12;
  ``fineweb_short_lines``: share of lines of at most 30 characters <= 0.67;
  ``fineweb_duplicate_line_chars``: characters in repeated lines <= 0.01 of the text's;
  ``fineweb_list_like``: newlines per word <= 0.3. Their metrics (``metrics["fineweb"]``) are
  measured when one of them is among the rules: the default rules are Gopher's and C4's
  (:data:`DEFAULT_RULES`), as before FineWeb's were added.

Sidecar attributes: ``{"passed": bool, "failed": [rule, ...], "metrics": {name: value}}``. Sidecars
are made file by file (:mod:`marin.processing.per_file`): a later build over a changed set of
document shards evaluates only the new and changed shards.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import DOCUMENT_SUFFIXES, Shard, iter_corpus, write_sidecar, write_summary
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files
from marin.processing.quality.fineweb import fineweb_metrics
from marin.processing.text import words
from rigging.fields import added_field

__all__ = ["C4_RULES", "DEFAULT_RULES", "FINEWEB_RULES", "GOPHER_RULES", "HeuristicRule", "HeuristicsConfig",
           "evaluate_heuristics", "heuristics_step"]

_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
_BULLETS = ("\u2022", "-", "*", "\u25cf", "\u2023", "\u25e6", "\u2013", "\u00b7", "\u25aa")
_TERMINAL = (".", "!", "?", '"', "\u201d")
# Tried only where a run of terminators starts (from inside a run it ends where the run's first
# character would, so it matches there exactly when it does from the run's start; tried at every
# character, a long run not followed by a space is scanned once per character: quadratic), and the
# run taken whole (possessive: a shorter run is followed by a terminator, never a space).
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]++[\"\u201d]?(?=\s|$)")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")


class HeuristicRule(enum.Enum):
    """The rules a document can fail."""

    WORD_COUNT = "word_count"
    MEAN_WORD_LENGTH = "mean_word_length"
    SYMBOL_RATIO = "symbol_ratio"
    BULLET_LINES = "bullet_lines"
    ELLIPSIS_LINES = "ellipsis_lines"
    ALPHA_WORDS = "alpha_words"
    STOP_WORDS = "stop_words"
    DUPLICATE_LINES = "duplicate_lines"
    DUPLICATE_PARAGRAPHS = "duplicate_paragraphs"
    TOP_NGRAM = "top_ngram"
    DUPLICATE_NGRAM = "duplicate_ngram"
    C4_KEPT_LINES = "c4_kept_lines"
    C4_SENTENCES = "c4_sentences"
    C4_LOREM_IPSUM = "c4_lorem_ipsum"
    C4_CURLY_BRACE = "c4_curly_brace"
    FINEWEB_LINE_PUNCTUATION = "fineweb_line_punctuation"
    FINEWEB_SHORT_LINES = "fineweb_short_lines"
    FINEWEB_DUPLICATE_LINE_CHARS = "fineweb_duplicate_line_chars"
    FINEWEB_LIST_LIKE = "fineweb_list_like"


C4_RULES = tuple(r for r in HeuristicRule if r.value.startswith("c4_"))
"""C4's rules."""
FINEWEB_RULES = tuple(r for r in HeuristicRule if r.value.startswith("fineweb_"))
"""FineWeb's rules."""
GOPHER_RULES = tuple(r for r in HeuristicRule if r not in C4_RULES and r not in FINEWEB_RULES)
"""Gopher's rules."""
DEFAULT_RULES = GOPHER_RULES + C4_RULES
"""The rules that decide ``passed`` unless others are named: Gopher's and C4's."""


@dataclass(frozen=True)
class HeuristicsConfig:
    """Gopher and C4 rules with their published thresholds."""

    input: Any
    """Documents: a folder, glob or list of JSON-lines shards, or a step/handle output."""
    rules: tuple[HeuristicRule, ...] = DEFAULT_RULES
    """Rules that decide ``passed`` (every Gopher and C4 metric is reported either way; FineWeb's
    when one of its rules is here)."""
    min_words: int = 50
    """Fewest tokens."""
    max_words: int = 100_000
    """Most tokens."""
    min_mean_word_length: float = 3.0
    """Shortest mean token length."""
    max_mean_word_length: float = 10.0
    """Longest mean token length."""
    max_symbol_ratio: float = 0.1
    """Most ``#`` or ellipses per token (each)."""
    max_bullet_line_fraction: float = 0.9
    """Most lines starting with a bullet."""
    max_ellipsis_line_fraction: float = 0.3
    """Most lines ending with an ellipsis."""
    min_alpha_word_fraction: float = 0.8
    """Fewest tokens holding a letter."""
    min_stop_words: int = 2
    """Fewest distinct stop words."""
    max_duplicate_fraction: float = 0.3
    """Most lines (paragraphs) repeating an earlier one."""
    max_duplicate_char_fraction: float = 0.2
    """Most characters in repeated lines (paragraphs)."""
    top_ngram_limits: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    """``(n, limit)``: the most frequent n-gram's share of characters."""
    duplicate_ngram_limits: tuple[tuple[int, float], ...] = (
        (5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    """``(n, limit)``: share of characters covered by repeated n-grams."""
    c4_min_words_per_line: int = 5
    """C4 keeps lines of at least this many words."""
    c4_min_sentences: int = 3
    """Fewest sentences in the lines C4 keeps."""
    c4_min_kept_fraction: float = 0.5
    """Smallest share of characters in lines C4 keeps."""
    fineweb_min_punctuated_lines: float = added_field(default=0.12)
    """FineWeb: fewest lines ending in a sentence terminal (share)."""
    fineweb_short_line_chars: int = added_field(default=30)
    """FineWeb: a line of at most this many characters is short."""
    fineweb_max_short_lines: float = added_field(default=0.67)
    """FineWeb: most short lines (share)."""
    fineweb_max_duplicate_line_chars: float = added_field(default=0.01)
    """FineWeb: most characters in lines equal to an earlier one (share of the text's)."""
    fineweb_max_newlines_per_word: float = added_field(default=0.3)
    """FineWeb: most newlines per word (more is a list)."""

    def __post_init__(self) -> None:
        if self.min_words < 0 or self.max_words < self.min_words:
            raise ValueError(f"need 0 <= min_words <= max_words, got {self.min_words} and {self.max_words}")
        if self.min_mean_word_length > self.max_mean_word_length:
            raise ValueError(f"min_mean_word_length must be <= max_mean_word_length, got "
                             f"{self.min_mean_word_length} > {self.max_mean_word_length}")
        for name in ("max_symbol_ratio", "max_bullet_line_fraction", "max_ellipsis_line_fraction",
                     "min_alpha_word_fraction", "max_duplicate_fraction", "max_duplicate_char_fraction",
                     "c4_min_kept_fraction", "fineweb_min_punctuated_lines", "fineweb_max_short_lines",
                     "fineweb_max_duplicate_line_chars"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("top_ngram_limits", "duplicate_ngram_limits"):
            for n, limit in getattr(self, name):
                if n < 1 or not 0 <= limit <= 1:
                    raise ValueError(f"{name} entries must be (n >= 1, limit in [0, 1]), got {(n, limit)}")
        if self.fineweb_short_line_chars < 0 or self.fineweb_max_newlines_per_word < 0:
            raise ValueError(f"fineweb_short_line_chars and fineweb_max_newlines_per_word must be >= 0, got "
                             f"{self.fineweb_short_line_chars} and {self.fineweb_max_newlines_per_word}")
        object.__setattr__(self, "rules", tuple(HeuristicRule(r) for r in self.rules))


def _duplicate_share(items: list[str]) -> tuple[float, float]:
    """(share of items equal to an earlier one, their share of characters)."""
    if not items:
        return 0.0, 0.0
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        seen.add(item)
    return count / len(items), chars / max(sum(len(i) for i in items), 1)


def _window_keys(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit key per window of ``n`` word ids (polynomial in the ids; collisions negligible)."""
    count = len(ids) - n + 1
    keys = np.zeros(count, dtype=np.uint64)
    for k in range(n):
        keys = keys * np.uint64(0x100000001B3) + ids[k:k + count]
    return keys


def _ngram_metrics(tokens: list[str], config: HeuristicsConfig) -> tuple[dict[str, float], dict[str, float]]:
    vocabulary: dict[str, int] = {}
    ids = np.fromiter((vocabulary.setdefault(w, len(vocabulary) + 1) for w in tokens), dtype=np.uint64,
                      count=len(tokens))
    lengths = np.fromiter((len(w) for w in tokens), dtype=np.int64, count=len(tokens))
    total = int(lengths.sum()) or 1
    prefix = np.concatenate(([0], np.cumsum(lengths)))
    top: dict[str, float] = {}
    for n, _limit in config.top_ngram_limits:
        top[str(n)] = 0.0
        if len(tokens) >= n:
            _keys, first, counts = np.unique(_window_keys(ids, n), return_index=True, return_counts=True)
            best = counts.max()
            if best > 1:
                chars = prefix[first + n] - prefix[first]
                top[str(n)] = float(best * chars[counts == best].max()) / total
    duplicate: dict[str, float] = {}
    for n, _limit in config.duplicate_ngram_limits:
        duplicate[str(n)] = 0.0
        if len(tokens) >= n:
            _keys, inverse, counts = np.unique(_window_keys(ids, n), return_inverse=True, return_counts=True)
            starts = np.flatnonzero(counts[inverse] > 1)
            if starts.size:
                edges = np.zeros(len(tokens) + 1, dtype=np.int64)
                np.add.at(edges, starts, 1)
                np.add.at(edges, starts + n, -1)
                covered = np.cumsum(edges[:-1]) > 0
                duplicate[str(n)] = float(lengths[covered].sum()) / total
    return top, duplicate


def evaluate_heuristics(text: str, config: HeuristicsConfig) -> dict[str, Any]:
    """The metrics of ``text``, the rules it fails (of ``config.rules``) and whether it passed."""
    tokens = text.split()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]
    norm_words = words(text)
    n_tokens = len(tokens)
    per_token = max(n_tokens, 1)
    dup_lines, dup_line_chars = _duplicate_share(lines)
    dup_paras, dup_para_chars = _duplicate_share(paragraphs)
    top, duplicate = _ngram_metrics(norm_words, config)
    kept = [line for line in lines if line.endswith(_TERMINAL) and len(line.split()) >= config.c4_min_words_per_line
            and "javascript" not in line.lower()]
    lowered = text.lower()
    metrics: dict[str, Any] = {
        "word_count": n_tokens,
        "mean_word_length": sum(len(t) for t in tokens) / per_token,
        "hash_ratio": text.count("#") / per_token,
        "ellipsis_ratio": (text.count("...") + text.count("\u2026")) / per_token,
        "bullet_lines": sum(1 for line in lines if line.startswith(_BULLETS)) / max(len(lines), 1),
        "ellipsis_lines": sum(1 for line in lines if line.endswith(("...", "\u2026"))) / max(len(lines), 1),
        "alpha_words": sum(1 for t in tokens if _LETTER.search(t)) / per_token,
        "stop_words": len(_STOP_WORDS.intersection(norm_words)),
        "duplicate_lines": dup_lines, "duplicate_line_chars": dup_line_chars,
        "duplicate_paragraphs": dup_paras, "duplicate_paragraph_chars": dup_para_chars,
        "top_ngram": top, "duplicate_ngram": duplicate,
        "c4_kept_fraction": sum(len(line) for line in kept) / max(sum(len(line) for line in lines), 1),
        "c4_sentences": sum(len(_SENTENCE_END.findall(line)) for line in kept),
        "c4_lorem_ipsum": "lorem ipsum" in lowered, "c4_curly_brace": "{" in text or "}" in text,
    }
    m, c = metrics, config
    fw: dict[str, float] = {}
    if any(rule in FINEWEB_RULES for rule in config.rules):
        fw = metrics["fineweb"] = fineweb_metrics(text, config.fineweb_short_line_chars)
    fails = {
        HeuristicRule.WORD_COUNT: not c.min_words <= n_tokens <= c.max_words,
        HeuristicRule.MEAN_WORD_LENGTH: not c.min_mean_word_length <= m["mean_word_length"] <= c.max_mean_word_length,
        HeuristicRule.SYMBOL_RATIO: m["hash_ratio"] > c.max_symbol_ratio or m["ellipsis_ratio"] > c.max_symbol_ratio,
        HeuristicRule.BULLET_LINES: m["bullet_lines"] > c.max_bullet_line_fraction,
        HeuristicRule.ELLIPSIS_LINES: m["ellipsis_lines"] > c.max_ellipsis_line_fraction,
        HeuristicRule.ALPHA_WORDS: m["alpha_words"] < c.min_alpha_word_fraction,
        HeuristicRule.STOP_WORDS: m["stop_words"] < c.min_stop_words,
        HeuristicRule.DUPLICATE_LINES: dup_lines > c.max_duplicate_fraction or dup_line_chars > c.max_duplicate_char_fraction,
        HeuristicRule.DUPLICATE_PARAGRAPHS: (dup_paras > c.max_duplicate_fraction
                                             or dup_para_chars > c.max_duplicate_char_fraction),
        HeuristicRule.TOP_NGRAM: any(top[str(n)] > limit for n, limit in c.top_ngram_limits),
        HeuristicRule.DUPLICATE_NGRAM: any(duplicate[str(n)] > limit for n, limit in c.duplicate_ngram_limits),
        HeuristicRule.C4_KEPT_LINES: m["c4_kept_fraction"] < c.c4_min_kept_fraction,
        HeuristicRule.C4_SENTENCES: m["c4_sentences"] < c.c4_min_sentences,
        HeuristicRule.C4_LOREM_IPSUM: m["c4_lorem_ipsum"],
        HeuristicRule.C4_CURLY_BRACE: m["c4_curly_brace"],
        HeuristicRule.FINEWEB_LINE_PUNCTUATION: bool(fw) and fw["line_punctuation"] < c.fineweb_min_punctuated_lines,
        HeuristicRule.FINEWEB_SHORT_LINES: bool(fw) and fw["short_lines"] > c.fineweb_max_short_lines,
        HeuristicRule.FINEWEB_DUPLICATE_LINE_CHARS: (bool(fw) and fw["duplicate_line_chars"]
                                                     > c.fineweb_max_duplicate_line_chars),
        HeuristicRule.FINEWEB_LIST_LIKE: bool(fw) and fw["newlines_per_word"] > c.fineweb_max_newlines_per_word,
    }
    failed = [rule.value for rule in config.rules if fails[rule]]
    return {"passed": not failed, "failed": failed, "metrics": _rounded(metrics)}


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 6)
    return value


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def heuristics_step(config: HeuristicsConfig, output_path: str) -> None:
    """Step function: heuristic-rule sidecars and ``_summary.json`` (documents, passed, failures per rule)."""

    def one(f: InputFile) -> PartOutput:
        shard = Shard(f.path, f.name)
        docs = [doc for _index, doc in iter_corpus([shard])]
        attributes = [evaluate_heuristics(doc["text"], config) for doc in docs]
        write_sidecar(output_path, shard, [doc["id"] for doc in docs], attributes)
        failures = Counter(rule for a in attributes for rule in a["failed"])
        return PartOutput((f.name,), {"documents": len(attributes), "passed": sum(1 for a in attributes if a["passed"]),
                                      "failures": dict(sorted(failures.items()))})

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    write_summary(output_path, {
        "step": "heuristics", "shards": len(parts), "documents": sum(p.stats["documents"] for p in parts),
        "passed": sum(p.stats["passed"] for p in parts),
        "failures": {rule.value: sum(p.stats["failures"].get(rule.value, 0) for p in parts) for rule in config.rules},
    })
