"""Read what steps leave in their output folders: training metrics, tokenized indexes, logs.

Every reader tolerates a missing or half-written file (a step may still be running, or may not
be a training or tokenize step at all) and returns ``None`` rather than raising.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from levanter.memory import MEMORY_FILE
from marin.experiment.eval_results import read_eval_results  # the one reader, beside its format: re-exported
from rigging import filesystem as fs
from zephyr.shards import INDEX_FILE, TOKENIZED_FORMAT

__all__ = [
    "INDEX_FILE",
    "KNOWN_SERIES",
    "MEMORY_FILE",
    "METRICS_FILE",
    "Metrics",
    "SplitSummary",
    "TokenizedSummary",
    "read_eval_results",
    "read_log_tail",
    "read_memory",
    "read_metrics",
    "read_tokenized",
    "read_train_summary",
]

METRICS_FILE = "metrics.jsonl"

# The series a training step may log, in the order they are shown; others are kept after these.
KNOWN_SERIES = ("loss", "val_loss", "lr", "tokens_per_s", "grad_norm", "mfu")


@dataclass
class Metrics:
    """The numeric series of one ``metrics.jsonl``: ``{key: [(step, value), ...]}``.

    Attributes:
        series: each numeric key's finite values by step, in file order.
        rows: how many JSON rows with a ``step`` were read.
        skipped: lines that were not such rows (blank, malformed, or a half-written last line).
    """

    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    rows: int = 0
    skipped: int = 0

    def last(self, key: str) -> tuple[float, float] | None:
        """The last ``(step, value)`` of ``key``, or None when it was never logged."""
        points = self.series.get(key)
        return points[-1] if points else None

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "skipped": self.skipped,
            "series": {key: [[x, y] for x, y in points] for key, points in self.series.items()},
        }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_metrics(text: str) -> Metrics:
    """Parse the text of a ``metrics.jsonl`` (one JSON object per line, each with a ``step``)."""
    metrics = Metrics()
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            metrics.skipped += 1
            continue
        step = _number(row.get("step")) if isinstance(row, dict) else None
        if step is None:
            metrics.skipped += 1
            continue
        metrics.rows += 1
        for key, raw in row.items():
            if key == "step":
                continue
            value = _number(raw)
            if value is not None:
                metrics.series.setdefault(key, []).append((step, value))
    order = {key: i for i, key in enumerate(KNOWN_SERIES)}
    metrics.series = dict(sorted(metrics.series.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return metrics


def _read_text(path: str) -> str | None:
    try:
        return fs.read_text(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError):
        return None


def read_metrics(output_path: str) -> Metrics | None:
    """The metrics of the step at ``output_path`` (or of a ``metrics.jsonl`` path itself).

    Returns None when there is no metrics file or it holds no row with a ``step``.
    """
    path = output_path if output_path.endswith(".jsonl") else fs.join(output_path, METRICS_FILE)
    text = _read_text(path)
    if text is None:
        return None
    metrics = parse_metrics(text)
    return metrics if metrics.rows else None


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
    text = _read_text(fs.join(output_path, INDEX_FILE))
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


def _read_json_object(path: str) -> dict[str, Any] | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_train_summary(output_path: str) -> dict[str, Any] | None:
    """The ``train_summary.json`` a training step wrote, or None."""
    from marin.experiment.train import TRAIN_SUMMARY_FILE

    return _read_json_object(fs.join(output_path, TRAIN_SUMMARY_FILE))


def read_memory(output_path: str) -> dict[str, Any] | None:
    """The per-device memory a training step measured at start (levanter's ``memory.json``), or None."""
    from levanter.memory import MemoryReport

    text = _read_text(fs.join(output_path, MEMORY_FILE))
    if text is None:
        return None
    try:
        return MemoryReport.from_json(json.loads(text)).to_json()
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def read_log_tail(log_path: str, max_lines: int = 60, max_chars: int = 20_000) -> str | None:
    """The last ``max_lines`` lines (at most ``max_chars`` characters) of a step's log, or None."""
    text = _read_text(log_path)
    if not text:
        return None
    tail = "\n".join(text.rstrip("\n").splitlines()[-max_lines:])
    return tail[-max_chars:]
