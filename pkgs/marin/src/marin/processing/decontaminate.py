"""Decontamination: training documents that contain evaluation items, by word n-gram overlap.

Text is compared as :func:`marin.processing.text.words` (lowercased, punctuation stripped,
whitespace collapsed), so an item re-wrapped to other line lengths or re-punctuated still matches.
An item's n-grams are its runs of ``ngram`` words; an item shorter than ``ngram`` words (but at
least ``min_item_words``) is one "n-gram" of all its words, found when the document holds that
exact run of words.

**Overlap** of a document with an item = the share of the item's distinct n-grams that occur in the
document. It is measured from the item's side on purpose: an item quoted inside a long document
has overlap 1 however long the document is (the document's share of matched n-grams would be
tiny), and a document that shares one stock phrase with a long item has a small overlap.

A document is **contaminated** by an eval set when its largest overlap with one of the set's
items is ``>= threshold`` and ``> 0``: threshold 0 flags any shared n-gram, 0.5 at least half of
an item's n-grams, 1 only documents holding every n-gram of some item.

Sidecar attributes: ``{"contaminated": bool, "overlap": <largest overlap>, "eval_set": <name> |
None, "item": <item id> | None, "matched_ngrams": int, "by_eval_set": {name: overlap > 0}}``.
Summary: counts, the **contamination matrix** ``{training source: {eval set: contaminated
documents}}`` (a document's source is its ``source_field`` when it has one, else the folder of
its shard, else ``"all"``), per eval set its items, items used, items found, and examples.
Sidecars are made file by file (:mod:`marin.processing.per_file`): a later build over a changed
set of document shards, against the same eval sets, checks only the new and changed shards.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import (
    DOCUMENT_SUFFIXES,
    Shard,
    iter_corpus,
    list_files,
    read_records,
    write_sidecar,
    write_summary,
)
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files
from marin.processing.text import ngram_hashes, words
from zephyr import DataError, FileSlice, TextMode, TextReader

__all__ = ["DecontaminateConfig", "EvalSet", "EvalIndex", "decontaminate_step", "load_eval_items"]

_TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst")
_MAX_EXAMPLES = 10


@dataclass(frozen=True)
class EvalSet:
    """An evaluation set to check training text against."""

    name: str
    """Its name in attributes and the contamination matrix."""
    path: Any
    """JSON-lines records or plain text files (folder, glob, list, or a step/handle output)."""
    fields: tuple[str, ...] = ("text",)
    """JSON-lines fields joined (in this order, those present) into an item's text; lm-eval style
    docs name theirs, e.g. ``("question", "answer")``."""
    id_field: str = "id"
    """Field naming an item (else ``<file>:<line>``)."""
    text_mode: TextMode = TextMode.LINES
    """Plain text files: one item per line, or per blank-line-separated paragraph."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an eval set needs a non-empty name")
        if not self.fields:
            raise ValueError(f"eval set {self.name!r}: fields must name at least one field")
        object.__setattr__(self, "text_mode", TextMode(self.text_mode))


@dataclass(frozen=True)
class DecontaminateConfig:
    """Training documents checked against evaluation sets."""

    input: Any
    """Training documents (folder, glob, list, or a step/handle output)."""
    against: tuple[EvalSet, ...]
    """The evaluation sets."""
    ngram: int = 13
    """Words per n-gram."""
    threshold: float = 0.5
    """Contaminated when the largest overlap is >= this and > 0 (see the module docstring)."""
    min_item_words: int = 5
    """Items with fewer words are not checked (they would match common phrases); counted."""
    source_field: str = "source"
    """Document field naming its training source (rows of the contamination matrix)."""

    def __post_init__(self) -> None:
        if not self.against:
            raise ValueError("against must name at least one eval set")
        names = [e.name for e in self.against]
        if len(set(names)) != len(names):
            raise ValueError(f"eval set names must be distinct, got {names}")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}")
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        if self.min_item_words < 1:
            raise ValueError(f"min_item_words must be >= 1, got {self.min_item_words}")


def _item_text(record: dict[str, Any], fields: tuple[str, ...]) -> str | None:
    parts = []
    for field in fields:
        value = record.get(field)
        if isinstance(value, list):
            parts.extend(str(v) for v in value)
        elif value is not None:
            parts.append(str(value))
    return " ".join(parts) if parts else None


def load_eval_items(eval_set: EvalSet) -> Iterator[tuple[str, str]]:
    """``(item id, text)`` of every item of ``eval_set``, in file order.

    Raises:
        DataError: a JSON-lines record has none of the set's ``fields``.
    """
    for shard in list_files(eval_set.path, DOCUMENT_SUFFIXES + _TEXT_SUFFIXES):
        if shard.path.lower().endswith(DOCUMENT_SUFFIXES):
            for number, record in enumerate(read_records(shard.path), 1):
                text = _item_text(record, eval_set.fields)
                if text is None:
                    raise DataError(shard.path, f"line {number}",
                                    f"none of the fields {list(eval_set.fields)} (has {sorted(record)[:10]})")
                item_id = record.get(eval_set.id_field)
                yield (str(item_id) if item_id is not None else f"{shard.name}:{number}"), text
        else:
            reader = TextReader(mode=eval_set.text_mode)
            for number, text in enumerate(reader.read(FileSlice(shard.path)), 1):
                yield f"{shard.name}:{number}", text


class EvalIndex:
    """The n-grams of every usable eval item, looked up by ``(length, hash)``."""

    def __init__(self, config: DecontaminateConfig):
        self.ngram = config.ngram
        self.items: list[tuple[int, str]] = []  # (eval set index, item id)
        self.sizes: list[int] = []
        self.stats = [{"items": 0, "items_used": 0, "too_short": 0} for _ in config.against]
        self._lookup: dict[tuple[int, int], list[int]] = {}
        for set_index, eval_set in enumerate(config.against):
            for item_id, text in load_eval_items(eval_set):
                self.stats[set_index]["items"] += 1
                tokens = words(text)
                if len(tokens) < config.min_item_words:
                    self.stats[set_index]["too_short"] += 1
                    continue
                self.stats[set_index]["items_used"] += 1
                length = min(len(tokens), self.ngram)
                grams = set(ngram_hashes(tokens, self.ngram))
                number = len(self.items)
                self.items.append((set_index, item_id))
                self.sizes.append(len(grams))
                for gram in grams:
                    self._lookup.setdefault((length, gram), []).append(number)
        self.lengths = sorted({length for length, _ in self._lookup})

    def matches(self, text: str) -> dict[int, int]:
        """``{item number: distinct n-grams of the item found in text}``."""
        tokens = words(text)
        counts: dict[int, int] = {}
        for length in self.lengths:
            if len(tokens) < length:
                continue
            for gram in set(ngram_hashes(tokens, length)):
                for number in self._lookup.get((length, gram), ()):
                    counts[number] = counts.get(number, 0) + 1
        return counts


def _source_of(doc: dict[str, Any], shard: Shard, field: str) -> str:
    value = doc.get(field)
    if isinstance(value, str) and value:
        return value
    folder = posixpath.dirname(shard.name)
    return folder or "all"


def _shard_attributes(index: EvalIndex, config: DecontaminateConfig, shard: Shard, output_path: str) -> PartOutput:
    """One shard's sidecar, and its counts (its rows of the matrix, the items it holds, examples)."""
    names = [e.name for e in config.against]
    matrix: dict[str, dict[str, int]] = {}
    found_items: list[set[str]] = [set() for _ in names]
    examples: list[dict[str, Any]] = []
    ids, attributes = [], []
    for _i, doc in iter_corpus([shard]):
        counts = index.matches(doc["text"])
        best: list[tuple[float, int, int]] = [(0.0, 0, -1) for _ in names]  # (overlap, matched, item)
        for number, matched in sorted(counts.items()):
            set_index = index.items[number][0]
            overlap = matched / index.sizes[number]
            if overlap > best[set_index][0]:
                best[set_index] = (overlap, matched, number)
        hit = [s for s, (overlap, _m, _n) in enumerate(best) if overlap > 0 and overlap >= config.threshold]
        top = max(range(len(names)), key=lambda s: (best[s][0], -s))
        overlap, matched, number = best[top]
        attrs = {"contaminated": bool(hit), "overlap": round(overlap, 6),
                 "eval_set": names[top] if number >= 0 else None,
                 "item": index.items[number][1] if number >= 0 else None, "matched_ngrams": matched,
                 "by_eval_set": {names[s]: round(o, 6) for s, (o, _m, _n) in enumerate(best) if o > 0}}
        if hit:
            row = matrix.setdefault(_source_of(doc, shard, config.source_field), dict.fromkeys(names, 0))
            for s in hit:
                row[names[s]] += 1
                found_items[s].add(index.items[best[s][2]][1])
            if len(examples) < _MAX_EXAMPLES:
                examples.append({"id": doc["id"], "eval_set": attrs["eval_set"], "item": attrs["item"],
                                 "overlap": attrs["overlap"]})
        ids.append(doc["id"])
        attributes.append(attrs)
    write_sidecar(output_path, shard, ids, attributes)
    return PartOutput((shard.name,), {
        "documents": len(ids), "contaminated": sum(1 for a in attributes if a["contaminated"]), "matrix": matrix,
        "items_found": [sorted(found, key=str) for found in found_items], "examples": examples})


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def decontaminate_step(config: DecontaminateConfig, output_path: str) -> None:
    """Step function: contamination sidecars and ``_summary.json`` (see the module docstring)."""
    index = EvalIndex(config)
    names = [e.name for e in config.against]

    def one(f: InputFile) -> PartOutput:
        return _shard_attributes(index, config, Shard(f.path, f.name), output_path)

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    matrix: dict[str, dict[str, int]] = {}
    for p in parts:
        for source, row in p.stats["matrix"].items():
            into = matrix.setdefault(source, dict.fromkeys(names, 0))
            for name, count in row.items():
                into[name] += count
    found = [{item for p in parts for item in p.stats["items_found"][s]} for s in range(len(names))]
    write_summary(output_path, {
        "step": "decontaminate", "shards": len(parts), "documents": sum(p.stats["documents"] for p in parts),
        "contaminated": sum(p.stats["contaminated"] for p in parts), "ngram": config.ngram,
        "threshold": config.threshold,
        "eval_sets": {name: {**index.stats[s], "items_found": len(found[s])} for s, name in enumerate(names)},
        "matrix": dict(sorted(matrix.items())),
        "examples": [e for p in parts for e in p.stats["examples"]][:_MAX_EXAMPLES],
    })
