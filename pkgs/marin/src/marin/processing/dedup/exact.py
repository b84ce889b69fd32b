"""Exact deduplication of whole documents and of paragraphs, as attribute steps.

Documents are equal when their :func:`marin.processing.text.normalize`'d texts are (key: the
xxh3-128 of that form). Paragraphs are the non-blank lines of a text (see
:func:`marin.processing.text.paragraph_spans`), compared the same way. In both, the copy kept is
the first in the corpus's total order: shard (in listing order), then line, then, for
paragraphs, position in the text; for documents, the config's ``keep`` rule may choose another
(:mod:`marin.processing.dedup.keep`).

Sidecar attributes:

* documents: ``{"duplicate": bool, "cluster": <hex key>, "representative": <id of the copy kept>}``
* paragraphs: ``{"duplicate_spans": [[start, end], ...], "duplicate_chars": int, "paragraphs": int}``,
  spans being ``[start, end)`` character offsets into the document's ``text`` of every paragraph
  that already occurred earlier (so ``text[start:end]`` is that paragraph).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from marin.processing.attributes import Shard, iter_corpus, list_shards, write_sidecar, write_summary
from marin.processing.dedup.grouping import GroupBy, Grouping, default_group_by, step_group_by
from marin.processing.dedup.keep import Keep, KeepRule, check_keep, choose, keep_value
from marin.processing.text import content_hash, paragraph_spans
from rigging.fields import added_field, unhashed_field

__all__ = [
    "ExactDedupConfig",
    "ParagraphDedupConfig",
    "dedup_exact_documents",
    "dedup_exact_paragraphs",
    "exact_dedup_step",
    "paragraph_dedup_step",
]

_MAX_EXAMPLES = 5


@dataclass(frozen=True)
class ExactDedupConfig:
    """Exact duplicate documents."""

    input: Any
    """Documents: a folder, glob or list of JSON-lines shards, or a step/handle output."""
    grouping: Grouping = unhashed_field(default=Grouping.IN_PROCESS)
    """Where documents are grouped by key (the same attributes either way)."""
    keep: KeepRule = added_field(default=Keep.FIRST)
    """Which copy is the representative, the one not marked duplicate
    (:mod:`marin.processing.dedup.keep`): the first in the corpus's order by default."""

    def __post_init__(self) -> None:
        check_keep(self.keep)


@dataclass(frozen=True)
class ParagraphDedupConfig:
    """Exact duplicate paragraphs (non-blank lines)."""

    input: Any
    """Documents: a folder, glob or list of JSON-lines shards, or a step/handle output."""
    min_chars: int = 0
    """Paragraphs shorter than this (stripped) are never marked duplicate."""
    grouping: Grouping = unhashed_field(default=Grouping.IN_PROCESS)
    """Where paragraphs are grouped by key (the same attributes either way)."""

    def __post_init__(self) -> None:
        if self.min_chars < 0:
            raise ValueError(f"min_chars must be >= 0, got {self.min_chars}")


def _doc_key(record: tuple[str, tuple[int, int], Any]) -> str:
    return record[0]


def _doc_reducer(key: str, members: Iterable[tuple[str, tuple[int, int], Any]]) -> Iterator[tuple[tuple[int, int], dict]]:
    ordered = sorted(members, key=lambda m: m[1])
    representative = ordered[0][2]
    for i, (_key, order, _id) in enumerate(ordered):
        yield order, {"duplicate": i > 0, "cluster": key, "representative": representative}


def dedup_exact_documents(shards: list[Shard], group_by: GroupBy = default_group_by, keep: KeepRule = Keep.FIRST
                          ) -> tuple[list[list[Any]], list[list[dict]]]:
    """Ids and exact-duplicate attributes of every document of ``shards``, per shard; the copy
    kept is the one ``keep`` chooses."""
    ids: list[list[Any]] = [[] for _ in shards]
    records = []
    values: list[Any] = []  # the keep rule's value of every document, in the total order
    for index, doc in iter_corpus(shards):
        records.append((content_hash(doc["text"]), (index, len(ids[index])), doc["id"]))
        ids[index].append(doc["id"])
        if keep is not Keep.FIRST:
            values.append(keep_value(keep, doc))
    attributes: list[list[dict]] = [[{}] * len(shard_ids) for shard_ids in ids]
    for (index, line), attrs in group_by(records, _doc_key, _doc_reducer):
        attributes[index][line] = attrs
    if keep is not Keep.FIRST:
        _choose_representatives(ids, attributes, values)
    return ids, attributes


def _choose_representatives(ids: list[list[Any]], attributes: list[list[dict]], values: list[Any]) -> None:
    """Make the copy the keep rule's ``values`` choose each cluster's representative (in place)."""
    where = [(index, line) for index, shard_ids in enumerate(ids) for line in range(len(shard_ids))]
    clusters: dict[str, list[int]] = {}
    for g, (index, line) in enumerate(where):
        clusters.setdefault(attributes[index][line]["cluster"], []).append(g)
    for key, members in clusters.items():
        if len(members) > 1:
            kept = choose(members, values)
            representative = ids[where[kept][0]][where[kept][1]]
            for g in members:
                index, line = where[g]
                attributes[index][line] = {"duplicate": g != kept, "cluster": key, "representative": representative}


def exact_dedup_step(config: ExactDedupConfig, output_path: str) -> None:
    """Step function: exact-duplicate document sidecars and ``_summary.json``.

    Summary: ``documents``, ``duplicates`` (documents marked duplicate), ``clusters`` (keys held by
    more than one document), ``examples`` (a few duplicates with their representative).
    """
    shards = list_shards(config.input)
    with step_group_by(config.grouping, output_path) as group_by:
        ids, attributes = dedup_exact_documents(shards, group_by, config.keep)
    for shard, shard_ids, attrs in zip(shards, ids, attributes, strict=True):
        write_sidecar(output_path, shard, shard_ids, attrs)
    flat = [(doc_id, a) for shard_ids, attrs in zip(ids, attributes, strict=True) for doc_id, a in zip(shard_ids, attrs, strict=True)]
    duplicates = [(doc_id, a) for doc_id, a in flat if a["duplicate"]]
    write_summary(output_path, {
        "step": "dedup_exact", "shards": len(shards), "documents": len(flat), "duplicates": len(duplicates),
        "clusters": len({a["cluster"] for _, a in duplicates}),
        "examples": [{"id": doc_id, "representative": a["representative"]} for doc_id, a in duplicates[:_MAX_EXAMPLES]],
    })


def _para_key(record: tuple[str, tuple[int, int, int], tuple[int, int]]) -> str:
    return record[0]


def _para_reducer(key: str, members: Iterable[tuple[str, tuple[int, int, int], tuple[int, int]]]
                  ) -> Iterator[tuple[tuple[int, int, int], tuple[int, int]]]:
    # Every occurrence after the first in the total order is a duplicate.
    yield from ((order, span) for _key, order, span in sorted(members, key=lambda m: m[1])[1:])


def dedup_exact_paragraphs(shards: list[Shard], min_chars: int = 0, group_by: GroupBy = default_group_by
                           ) -> tuple[list[list[Any]], list[list[dict]]]:
    """Ids and duplicate-paragraph attributes of every document of ``shards``, per shard."""
    ids: list[list[Any]] = [[] for _ in shards]
    counts: list[list[int]] = [[] for _ in shards]
    records = []
    for index, doc in iter_corpus(shards):
        text = doc["text"]
        line = len(ids[index])
        spans = [s for s in paragraph_spans(text) if s[1] - s[0] >= min_chars]
        records.extend((content_hash(text[lo:hi]), (index, line, k), (lo, hi)) for k, (lo, hi) in enumerate(spans))
        ids[index].append(doc["id"])
        counts[index].append(len(spans))
    duplicate_spans: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for (index, line, k), (lo, hi) in group_by(records, _para_key, _para_reducer):
        duplicate_spans.setdefault((index, line), []).append((k, lo, hi))
    attributes: list[list[dict]] = []
    for index, shard_counts in enumerate(counts):
        shard_attrs = []
        for line, count in enumerate(shard_counts):
            spans = [[lo, hi] for _k, lo, hi in sorted(duplicate_spans.get((index, line), []))]
            shard_attrs.append({"duplicate_spans": spans, "duplicate_chars": sum(hi - lo for lo, hi in spans),
                                "paragraphs": count})
        attributes.append(shard_attrs)
    return ids, attributes


def paragraph_dedup_step(config: ParagraphDedupConfig, output_path: str) -> None:
    """Step function: duplicate-paragraph sidecars and ``_summary.json``.

    Summary: ``documents``, ``paragraphs``, ``duplicate_paragraphs``, ``duplicate_chars``,
    ``documents_with_duplicates``.
    """
    shards = list_shards(config.input)
    with step_group_by(config.grouping, output_path) as group_by:
        ids, attributes = dedup_exact_paragraphs(shards, config.min_chars, group_by)
    for shard, shard_ids, attrs in zip(shards, ids, attributes, strict=True):
        write_sidecar(output_path, shard, shard_ids, attrs)
    flat = [a for attrs in attributes for a in attrs]
    write_summary(output_path, {
        "step": "dedup_paragraphs", "shards": len(shards), "documents": len(flat),
        "paragraphs": sum(a["paragraphs"] for a in flat),
        "duplicate_paragraphs": sum(len(a["duplicate_spans"]) for a in flat),
        "duplicate_chars": sum(a["duplicate_chars"] for a in flat),
        "documents_with_duplicates": sum(1 for a in flat if a["duplicate_spans"]),
    })
