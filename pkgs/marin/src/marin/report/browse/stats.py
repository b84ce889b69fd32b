"""A step's records as histograms: document lengths, and every attribute or field a record carries
(numbers in bins, labels and flags counted: quality scores, languages, duplicate marks)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from marin.report.browse.records import iter_records
from marin.report.browse.store_view import TOKEN_SUFFIXES, StepView

__all__ = ["RECORDS_MAX", "histogram", "step_stats"]

RECORDS_MAX = 200_000
"""The most records read for one step's histograms (the answer says when there were more)."""
_BINS = 20
_LABELS_MAX = 30  # categories shown; the rest are counted together
_SKIPPED_FIELDS = ("id", "text")


def histogram(values: list[float]) -> dict[str, Any]:
    """Numbers in at most 20 equal bins (one per integer when they are few integers)."""
    lo, hi = min(values), max(values)
    integers = all(float(v).is_integer() for v in values)
    if integers and hi - lo < _BINS:
        edges = [lo + k for k in range(int(hi - lo) + 2)]
    else:
        width = (hi - lo) / _BINS or 1.0
        edges = [lo + k * width for k in range(_BINS + 1)]
    counts = [0] * (len(edges) - 1)
    for v in values:
        k = min(len(counts) - 1, int((v - lo) / (edges[1] - edges[0])))
        counts[k] += 1
    return {"kind": "numbers", "count": len(values), "min": lo, "max": hi, "mean": sum(values) / len(values),
            "bins": [[edges[k], edges[k + 1], c] for k, c in enumerate(counts)]}


def _labels(values: list[Any]) -> dict[str, Any]:
    counts = Counter("none" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in values)
    top = counts.most_common(_LABELS_MAX)
    return {"kind": "labels", "count": len(values), "distinct": len(counts),
            "counts": [[label, n] for label, n in top], "others": sum(counts.values()) - sum(n for _, n in top)}


def _flat(record: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of every field, nested objects one level deep (``scores.en``), lists by length."""
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not prefix:
            yield from _flat(value, f"{name}.")
        elif isinstance(value, list):
            yield f"{name} (items)", len(value)
        elif not isinstance(value, dict):
            yield name, value


def _field_stats(rows: Iterable[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    by_field: dict[str, list[Any]] = {}
    for name, value in rows:
        by_field.setdefault(name, []).append(value)
    out = {}
    for name, values in by_field.items():
        if all(v is None for v in values):
            continue
        numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
        if numbers and len(numbers) == len([v for v in values if v is not None]):
            out[name] = histogram(numbers)
        else:
            labels = _labels(values)
            # Labels that mostly differ (ids, URLs, cluster keys) make no histogram.
            if labels["distinct"] <= max(1.0, len(values) / 2):
                out[name] = labels
    return out


def _token_lengths(step: StepView, files: list[str]) -> list[float]:
    # Imported here: array_record is needed by token shards alone.
    from zephyr.shards import TokenShardReader

    lengths: list[float] = []
    for rel in files:
        with TokenShardReader(step.path_of(rel)) as shard:
            lengths.extend(float(len(shard[k])) for k in range(min(len(shard), RECORDS_MAX - len(lengths))))
    return lengths


def step_stats(step: StepView, folder: str | None = None) -> dict[str, Any]:
    """Histograms of the records of the step's data files (those under ``folder``, when given)."""
    files = [f for f in step.data_files() if folder is None or f.startswith(folder.rstrip("/") + "/")]
    if files and all(f.endswith(TOKEN_SUFFIXES) for f in files):
        lengths = _token_lengths(step, files)
        return {"records": len(lengths), "more": len(lengths) >= RECORDS_MAX,
                "histograms": {"length (tokens)": histogram(lengths)} if lengths else {}}
    rows: list[tuple[str, Any]] = []
    count = 0
    for rel in (f for f in files if not f.endswith(TOKEN_SUFFIXES)):
        for record in iter_records(step.path_of(rel)):
            count += 1
            text = record.get("text")
            if isinstance(text, str):
                rows += [("length (characters)", len(text)), ("length (words)", len(text.split()))]
            fields = record.get("attributes") if set(record) == {"id", "attributes"} else record
            if isinstance(fields, dict):
                rows.extend((n, v) for n, v in _flat(fields) if n not in _SKIPPED_FIELDS)
            if count >= RECORDS_MAX:
                break
        if count >= RECORDS_MAX:
            break
    return {"records": count, "more": count >= RECORDS_MAX, "histograms": _field_stats(rows)}
