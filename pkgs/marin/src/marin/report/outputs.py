"""Read what steps leave in their output folders: training metrics, tokenized indexes, data-curation
summaries, logs.

Training results are read by :mod:`marin.experiment.results`, eval results by
:mod:`marin.experiment.evaluation.results` (both re-exported here).

Every reader tolerates a missing or half-written file (a step may still be running, or may not
be a training or tokenize step at all) and returns ``None`` rather than raising.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from levanter.memory import MEMORY_FILE
from marin.experiment.evaluation.results import (
    read_eval_results,  # the one reader, beside its format: re-exported
)
from marin.experiment.results import (
    KNOWN_SERIES,
    METRICS_FILE,
    Metrics,
    parse_metrics,
    read_json_object,
    read_metrics,
    read_text_if_any,
    read_train_summary,
)
from marin.processing.attributes import SUMMARY_FILE
from marin.processing.consolidate import SNIPPET_CUT
from rigging import filesystem as fs
from zephyr.shards import INDEX_FILE, TOKENIZED_FORMAT

__all__ = [
    "INDEX_FILE",
    "KNOWN_SERIES",
    "MEMORY_FILE",
    "METRICS_FILE",
    "Metrics",
    "SUMMARY_FILE",
    "SplitSummary",
    "TokenizedSummary",
    "read_data_summary",
    "read_eval_results",
    "parse_metrics",
    "read_log_tail",
    "read_memory",
    "read_metrics",
    "read_tokenized",
    "read_train_summary",
]


@dataclass(frozen=True)
class SplitSummary:
    """One split of a tokenized dataset."""

    name: str
    documents: int | None
    tokens: int | None
    shards: int | None


@dataclass(frozen=True)
class TokenizedSummary:
    """What a tokenize step wrote: vocabulary size and, per split, documents, tokens and shards."""

    vocab_size: int | None
    splits: tuple[SplitSummary, ...]

    def total(self, attr: str) -> int | None:
        """The sum of ``attr`` (documents, tokens or shards) over splits, None if none report it."""
        values = [getattr(s, attr) for s in self.splits if getattr(s, attr) is not None]
        return sum(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "splits": [{"name": s.name, "documents": s.documents, "tokens": s.tokens, "shards": s.shards}
                       for s in self.splits],
            "totals": {attr: self.total(attr) for attr in ("documents", "tokens", "shards")},
        }


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        return len(value)
    return None


def read_tokenized(output_path: str) -> TokenizedSummary | None:
    """The summary of the ``index.json`` a tokenize step wrote, or None when there is none."""
    text = read_text_if_any(fs.join(output_path, INDEX_FILE))
    if text is None:
        return None
    try:
        index = json.loads(text)
    except ValueError:
        return None
    if not isinstance(index, dict) or index.get("format") != TOKENIZED_FORMAT:
        return None
    splits = []
    for name, split in sorted((index.get("splits") or {}).items()):
        if not isinstance(split, dict):
            continue
        documents = _count(split.get("records", split.get("documents")))
        splits.append(SplitSummary(name=str(name), documents=documents, tokens=_count(split.get("tokens")),
                                   shards=_count(split.get("shards"))))
    return TokenizedSummary(vocab_size=_count(index.get("vocab_size")), splits=tuple(splits))


def _scalars(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if isinstance(v, int | float | str | bool) and k != "step"}


def read_data_summary(output_path: str) -> dict[str, Any] | None:
    """What a data-curation step says of its output (its ``_summary.json``, see
    :mod:`marin.processing.attributes`), or None for other steps.

    Returns ``{"step": kind, "counts": {name: number or text}}``; a consolidate step's also has
    ``removed`` and ``edited`` per filter, the removed ``examples`` per filter (with, for duplicates,
    the representative kept), ``kept_examples``, and ``snippet_cut``, what joins a snippet's head
    and tail.
    """
    summary = read_json_object(fs.join(output_path, SUMMARY_FILE))
    if summary is None or not isinstance(summary.get("step"), str):
        return None
    data: dict[str, Any] = {"step": summary["step"], "counts": _scalars(summary)}
    if summary["step"] == "consolidate":
        for key in ("removed", "edited", "examples"):
            data[key] = summary.get(key) if isinstance(summary.get(key), dict) else {}
        data["kept_examples"] = summary.get("kept_examples") if isinstance(summary.get("kept_examples"), list) else []
        data["snippet_cut"] = SNIPPET_CUT
    return data


def read_memory(output_path: str) -> dict[str, Any] | None:
    """The per-device memory a training step measured at start (levanter's ``memory.json``), or None."""
    from levanter.memory import MemoryReport

    text = read_text_if_any(fs.join(output_path, MEMORY_FILE))
    if text is None:
        return None
    try:
        return MemoryReport.from_json(json.loads(text)).to_json()
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read_log_tail(log_path: str, max_lines: int = 60, max_chars: int = 20_000) -> str | None:
    """The last ``max_lines`` lines (at most ``max_chars`` characters) of a step's log, or None."""
    text = read_text_if_any(log_path)
    if not text:
        return None
    tail = "\n".join(text.rstrip("\n").splitlines()[-max_lines:])
    return tail[-max_chars:]
