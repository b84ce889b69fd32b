"""Consolidation: keep the documents that every filter allows, and say why each other one went.

Documents and the sidecars of the filters are read in lockstep (same shard names, same order,
ids checked line by line). Filters run in the order given; a document removed by one is counted
against that one only, so ``documents == kept + sum(removed.values())``. Kept documents are
written with the input's shard names (JSON lines, every field kept, ``text`` edited only by
:class:`RemoveDuplicateSpans`), ready for ``tokenized(source=<output>)``.

Filters (one dataclass each; ``name`` is its key in the summary):

* :class:`DropDuplicates`: drop documents marked ``duplicate`` (exact or fuzzy dedup); the
  representative stays. If the representative is removed by an earlier filter, its duplicates
  still go: the cluster is gone.
* :class:`DropContaminated`: drop documents marked ``contaminated``.
* :class:`KeepScore`: keep ``score >= min_score``, or the ``top_fraction`` best of the whole input
  (``floor(top_fraction * documents)`` of them; ties broken by corpus order, earlier first).
* :class:`KeepHeuristics`: keep documents that pass (all rules, or those named).
* :class:`KeepLanguages`: keep documents identified as one of the languages, with a score of at
  least ``min_score`` (FineWeb keeps English at 0.65).
* :class:`DropBlockedUrls`: drop documents whose URL a URL filter blocked.
* :class:`RemoveDuplicateSpans`: cut the duplicate paragraphs (spans of paragraph dedup) out of
  the text; a document left with no text is removed.

Summary: ``documents``, ``kept``, ``removed`` and ``edited`` per filter, per filter a few
``examples``: id, a snippet (the text's start and end), why, and for duplicates the representative's
id and snippet; and
``kept_examples``: the first few documents kept, each with what every filter saw in it
(``notes``: a score, an overlap, "not a duplicate"), to show beside the removed ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from marin.processing.attributes import (
    Shard,
    iter_corpus,
    iter_lockstep,
    list_shards,
    read_sidecar,
    write_jsonl,
    write_summary,
)
from marin.processing.quality.heuristics import HeuristicRule
from rigging import filesystem as fs

__all__ = [
    "SNIPPET_CUT",
    "ConsolidateConfig",
    "DropBlockedUrls",
    "DropContaminated",
    "DropDuplicates",
    "Filter",
    "KeepHeuristics",
    "KeepLanguages",
    "KeepScore",
    "RemoveDuplicateSpans",
    "consolidate_step",
]

# A snippet: the text's first and last characters (its whitespace collapsed), with SNIPPET_CUT
# between them when it is longer than both (a page's tail tells boilerplate from an article).
_HEAD, _TAIL = 220, 80
SNIPPET_CUT = " \u2026 "


@dataclass(frozen=True)
class DropDuplicates:
    """Drop documents a dedup step marked ``duplicate``."""

    attributes: Any
    """The dedup step's sidecar folder."""
    name: str = "duplicates"
    """Key in the summary."""


@dataclass(frozen=True)
class DropContaminated:
    """Drop documents a decontaminate step marked ``contaminated``."""

    attributes: Any
    """The decontaminate step's sidecar folder."""
    name: str = "contaminated"
    """Key in the summary."""


@dataclass(frozen=True)
class KeepScore:
    """Keep documents by classifier score: ``score >= min_score`` or the ``top_fraction`` best."""

    attributes: Any
    """The classify step's sidecar folder."""
    min_score: float | None = None
    """Lowest score kept (exclusive with ``top_fraction``)."""
    top_fraction: float | None = None
    """Share of the whole input kept, best scores first."""
    key: str = "score"
    """Attribute holding the score."""
    name: str = "quality"
    """Key in the summary."""

    def __post_init__(self) -> None:
        if (self.min_score is None) == (self.top_fraction is None):
            raise ValueError(f"KeepScore {self.name!r}: give exactly one of min_score and top_fraction")
        if self.top_fraction is not None and not 0 <= self.top_fraction <= 1:
            raise ValueError(f"top_fraction must be in [0, 1], got {self.top_fraction}")


@dataclass(frozen=True)
class KeepHeuristics:
    """Keep documents that pass the heuristic rules."""

    attributes: Any
    """The heuristics step's sidecar folder."""
    rules: tuple[HeuristicRule, ...] | None = None
    """Rules that must pass (None: the step's own ``passed``)."""
    name: str = "heuristics"
    """Key in the summary."""

    def __post_init__(self) -> None:
        if self.rules is not None:
            object.__setattr__(self, "rules", tuple(HeuristicRule(r) for r in self.rules))


@dataclass(frozen=True)
class KeepLanguages:
    """Keep documents in one of ``languages`` whose language score is at least ``min_score``."""

    attributes: Any
    """The language_id step's sidecar folder."""
    languages: tuple[str, ...]
    """Language codes kept (as the model names them: ``en``, ``de``, ...)."""
    min_score: float = 0.0
    """Lowest score kept."""
    name: str = "language"
    """Key in the summary."""

    def __post_init__(self) -> None:
        languages = (self.languages,) if isinstance(self.languages, str) else tuple(self.languages)
        if not languages or not all(isinstance(code, str) and code for code in languages):
            raise ValueError(f"KeepLanguages {self.name!r}: give the language codes kept, got {self.languages!r}")
        if not 0 <= self.min_score <= 1:
            raise ValueError(f"KeepLanguages {self.name!r}: min_score must be in [0, 1], got {self.min_score}")
        object.__setattr__(self, "languages", languages)


@dataclass(frozen=True)
class DropBlockedUrls:
    """Drop documents a URL filter marked ``blocked``."""

    attributes: Any
    """The url_filter step's sidecar folder."""
    name: str = "urls"
    """Key in the summary."""


@dataclass(frozen=True)
class RemoveDuplicateSpans:
    """Cut duplicate paragraphs (paragraph dedup spans) out of the text."""

    attributes: Any
    """The paragraph dedup step's sidecar folder."""
    name: str = "duplicate_paragraphs"
    """Key in the summary."""


Filter = (DropDuplicates | DropContaminated | KeepScore | KeepHeuristics | KeepLanguages | DropBlockedUrls
          | RemoveDuplicateSpans)


@dataclass(frozen=True)
class ConsolidateConfig:
    """Documents and the filters that decide which stay."""

    input: Any
    """Documents (folder, glob, list, or a step/handle output)."""
    filters: tuple[Filter, ...]
    """Applied in order; the first that removes a document is charged with it."""
    max_examples: int = 5
    """Removed documents shown per filter in the summary."""

    def __post_init__(self) -> None:
        names = [f.name for f in self.filters]
        if len(set(names)) != len(names):
            raise ValueError(f"filter names must be distinct (they key the summary), got {names}")
        if sum(isinstance(f, RemoveDuplicateSpans) for f in self.filters) > 1:
            raise ValueError("at most one RemoveDuplicateSpans filter (spans index the original text)")
        if self.max_examples < 0:
            raise ValueError(f"max_examples must be >= 0, got {self.max_examples}")


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _HEAD + _TAIL else flat[:_HEAD] + SNIPPET_CUT + flat[-_TAIL:]


def _cut(text: str, spans: list[list[int]]) -> str:
    pieces, start = [], 0
    for lo, hi in sorted(spans):
        pieces.append(text[start:lo])
        start = max(start, hi)
    pieces.append(text[start:])
    return "\n".join(line for line in "".join(pieces).split("\n") if line.strip())


def _top_fraction_keep(shards: list[Shard], spec: KeepScore) -> tuple[set[tuple[int, int]], float | None]:
    """Positions ``(shard, line)`` of the best ``top_fraction`` documents, and the lowest score kept."""
    scored = []
    for index, shard in enumerate(shards):
        for line, record in enumerate(read_sidecar(str(spec.attributes), shard)):
            scored.append((-float(record["attributes"][spec.key]), index, line))
    scored.sort()
    assert spec.top_fraction is not None
    count = math.floor(spec.top_fraction * len(scored) + 1e-9)
    kept = scored[:count]
    return {(i, line) for _s, i, line in kept}, (-kept[-1][0] if kept else None)


def _verdict(spec: Filter, attrs: dict[str, Any], position: tuple[int, int], text: str,
             top: dict[str, tuple[set[tuple[int, int]], float | None]]) -> tuple[str | None, str]:
    """(reason the document goes, or None; its text after this filter)."""
    if isinstance(spec, DropDuplicates):
        if attrs["duplicate"]:
            similarity = attrs.get("jaccard")
            extra = f" (Jaccard {similarity})" if similarity is not None else ""
            return f"duplicate of {attrs['representative']!r}{extra}", text
    elif isinstance(spec, DropContaminated):
        if attrs["contaminated"]:
            return f"overlap {attrs['overlap']} with {attrs['eval_set']} item {attrs['item']!r}", text
    elif isinstance(spec, KeepScore):
        score = float(attrs[spec.key])
        if spec.min_score is not None and score < spec.min_score:
            return f"{spec.key} {score} < {spec.min_score}", text
        if spec.top_fraction is not None:
            kept, cutoff = top[spec.name]
            if position not in kept:
                return f"{spec.key} {score} not in the top {spec.top_fraction} (lowest kept: {cutoff})", text
    elif isinstance(spec, KeepHeuristics):
        failed = attrs["failed"] if spec.rules is None else [r.value for r in spec.rules if r.value in attrs["failed"]]
        if (spec.rules is None and not attrs["passed"]) or failed:
            return f"failed {', '.join(failed) or 'heuristics'}", text
    elif isinstance(spec, KeepLanguages):
        if attrs["language"] not in spec.languages:
            return f"language {attrs['language']} (score {attrs['score']}) not in {', '.join(spec.languages)}", text
        if attrs["score"] < spec.min_score:
            return f"language {attrs['language']} score {attrs['score']} < {spec.min_score}", text
    elif isinstance(spec, DropBlockedUrls):
        if attrs["blocked"]:
            return f"blocked URL ({attrs['reason']})", text
    else:
        if attrs["duplicate_spans"]:
            text = _cut(text, attrs["duplicate_spans"])
            if not text.strip():
                return "every paragraph is a duplicate", text
    return None, text


def _note(spec: Filter, attrs: dict[str, Any]) -> str:
    """What ``spec`` saw in a document it let through."""
    if isinstance(spec, DropDuplicates):
        return "not a duplicate"
    if isinstance(spec, DropContaminated):
        return f"largest overlap {attrs['overlap']}"
    if isinstance(spec, KeepScore):
        return f"{spec.key} {float(attrs[spec.key])}"
    if isinstance(spec, KeepHeuristics):
        return "passed"
    if isinstance(spec, KeepLanguages):
        return f"language {attrs['language']} (score {attrs['score']})"
    if isinstance(spec, DropBlockedUrls):
        return "URL not blocked"
    spans = len(attrs["duplicate_spans"])
    return f"{spans} duplicate paragraph{'s' if spans != 1 else ''} cut" if spans else "no duplicate paragraph"


def consolidate_step(config: ConsolidateConfig, output_path: str) -> None:
    """Step function: write the kept documents and ``_summary.json`` (see the module docstring).

    Raises:
        zephyr.DataError: a sidecar is missing, or its ids differ from the documents' (naming the
            sidecar file and line).
    """
    shards = list_shards(config.input)
    folders = [str(f.attributes) for f in config.filters]
    top = {f.name: _top_fraction_keep(shards, f) for f in config.filters
           if isinstance(f, KeepScore) and f.top_fraction is not None}
    removed = {f.name: 0 for f in config.filters}
    edited = {f.name: 0 for f in config.filters}
    examples: dict[str, list[dict[str, Any]]] = {f.name: [] for f in config.filters}
    kept_examples: list[dict[str, Any]] = []
    documents = kept = 0
    for index, shard in enumerate(shards):
        rows = []
        for line, (doc, attrs) in enumerate(iter_lockstep(shard, folders)):
            documents += 1
            text = doc["text"]
            for spec, spec_attrs in zip(config.filters, attrs, strict=True):
                reason, new_text = _verdict(spec, spec_attrs, (index, line), text, top)
                if reason is not None:
                    removed[spec.name] += 1
                    if len(examples[spec.name]) < config.max_examples:
                        example = {"id": doc["id"], "snippet": _snippet(doc["text"]), "why": reason}
                        if isinstance(spec, DropDuplicates):
                            example["representative"] = {"id": spec_attrs["representative"]}
                        examples[spec.name].append(example)
                    break
                if new_text != text:
                    edited[spec.name] += 1
                    text = new_text
            else:
                rows.append({**doc, "text": text})
                kept += 1
                if len(kept_examples) < config.max_examples:
                    kept_examples.append({"id": doc["id"], "snippet": _snippet(text), "notes": {
                        spec.name: _note(spec, spec_attrs) for spec, spec_attrs in zip(config.filters, attrs, strict=True)}})
        write_jsonl(fs.join(output_path, shard.name), rows)
    _fill_representatives(shards, examples)
    write_summary(output_path, {
        "step": "consolidate", "shards": len(shards), "documents": documents, "kept": kept,
        "removed": removed, "edited": {k: v for k, v in edited.items() if v},
        "examples": {k: v for k, v in examples.items() if v}, "kept_examples": kept_examples,
    })


def _fill_representatives(shards: list[Shard], examples: dict[str, list[dict[str, Any]]]) -> None:
    """Add the snippet of each example's representative (one more pass, stopping when all are found)."""
    wanted = {e["representative"]["id"] for group in examples.values() for e in group if "representative" in e}
    found: dict[Any, str] = {}
    if wanted:
        for _index, doc in iter_corpus(shards):
            if doc["id"] in wanted and doc["id"] not in found:
                found[doc["id"]] = _snippet(doc["text"])
                if len(found) == len(wanted):
                    break
    for group in examples.values():
        for example in group:
            if "representative" in example:
                example["representative"]["snippet"] = found.get(example["representative"]["id"])
