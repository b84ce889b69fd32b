"""Documents side by side: the words two texts do not share marked, a dedup step's clusters (each
member beside its representative), and two steps' documents joined by id (two extractors of the
same pages, a corpus before and after a filter)."""

from __future__ import annotations

import difflib
import functools
import posixpath
import re
from typing import Any

from marin.processing.attributes import DOCUMENT_SUFFIXES
from marin.report.browse.records import TEXT_MAX, iter_records, shown_text
from marin.report.browse.store_view import PARQUET_SUFFIXES, BrowseError, StepView

__all__ = ["DOCUMENTS_MAX", "cluster", "clusters", "join", "marked"]

DOCUMENTS_MAX = 100_000
"""The most documents of one step read to join or to find a cluster's texts."""
_WORDS_MAX = 4_000  # words of each text compared (longer texts are compared on their start)
_CLUSTERS_SHOWN = 200
_JOIN_FILTERS = ("all", "differ", "a", "b")
DOCUMENT_FILES = (*DOCUMENT_SUFFIXES, *PARQUET_SUFFIXES)


def _tokens(text: str) -> list[str]:
    return re.findall(r"\S+|\s+", text[:TEXT_MAX])


def marked(text: str, other: str) -> list[list[Any]]:
    """``text`` as ``[[piece, differs], ...]``: its words that ``other`` lacks at that place
    marked (a word-level diff), spaces kept as they are."""
    mine, theirs = _tokens(text), _tokens(other)
    words = [k for k, t in enumerate(mine) if not t.isspace()][:_WORDS_MAX]
    others = [t for t in theirs if not t.isspace()][:_WORDS_MAX]
    differs = [False] * len(mine)
    matcher = difflib.SequenceMatcher(None, [mine[k] for k in words], others, autojunk=False)
    for op, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if op != "equal":
            for i in range(i1, i2):
                differs[words[i]] = True
    out: list[list[Any]] = []
    for token, diff in zip(mine, differs, strict=True):
        if out and out[-1][1] == diff:
            out[-1][0] += token
        else:
            out.append([token, diff])
    return out


def _documents(step: StepView, folder: str = "") -> dict[Any, str]:
    """``{id: text}`` of the step's documents under ``folder`` (by default, the folder of its first
    file of documents), in order, at most DOCUMENTS_MAX."""
    files = [f for f in step.data_files() if f.lower().endswith(DOCUMENT_FILES)]
    if not folder.strip("/") and files:
        folder = posixpath.dirname(files[0])
    below = folder.strip("/") + "/" if folder.strip("/") else ""
    return _read_documents(tuple(step.path_of(f) for f in files if f.startswith(below)))


@functools.lru_cache(maxsize=8)
def _read_documents(paths: tuple[str, ...]) -> dict[Any, str]:
    # A finished step's files never change: what was read once is kept (a few steps at a time).
    found: dict[Any, str] = {}
    for path in paths:
        for record in iter_records(path):
            if isinstance(record.get("text"), str) and "id" in record:
                found[record["id"]] = record["text"]
            if len(found) >= DOCUMENTS_MAX:
                return found
    return found


def _sidecars(step: StepView) -> list[dict[str, Any]]:
    return [r for rel in step.data_files() for r in iter_records(step.path_of(rel))]


def clusters(step: StepView) -> dict[str, Any]:
    """The clusters of a dedup step (documents marked ``duplicate`` and what they duplicate), the
    biggest first."""
    members: dict[Any, list[dict[str, Any]]] = {}
    for record in _sidecars(step):
        attributes = record.get("attributes") or {}
        if attributes.get("cluster") is not None and "representative" in attributes:
            members.setdefault(attributes["cluster"], []).append({"id": record["id"], **attributes})
    found = [{"cluster": key, "size": len(rows), "representative": rows[0]["representative"],
              "duplicates": sum(1 for r in rows if r.get("duplicate"))}
             for key, rows in members.items() if any(r.get("duplicate") for r in rows)]
    if not members:
        raise BrowseError(404, f"{step.output_name} has no duplicate clusters (not a dedup step's attributes)")
    found.sort(key=lambda c: (-c["size"], str(c["cluster"])))
    return {"clusters": found[:_CLUSTERS_SHOWN], "count": len(found)}


def _input_documents(step: StepView) -> dict[Any, str]:
    found = step.input_of("input")
    if found is None:
        raise BrowseError(404, f"the documents {step.output_name} describes are not a step of this store")
    upstream, below = found
    return _documents(upstream, below)


def cluster(step: StepView, key: str) -> dict[str, Any]:
    """One cluster: its representative and every member, each with the words it does not share
    with the representative marked (and the representative's words a member lacks)."""
    rows = [{"id": r["id"], **(r.get("attributes") or {})} for r in _sidecars(step)
            if (r.get("attributes") or {}).get("cluster") == key]
    if not rows:
        raise BrowseError(404, f"{step.output_name} has no cluster {key!r}")
    texts = _input_documents(step)
    rep_id = rows[0]["representative"]
    rep = texts.get(rep_id, "")
    members = []
    rep_marks = [[rep[:TEXT_MAX], False]]
    for row in rows:
        if row["id"] == rep_id:
            continue
        text = texts.get(row["id"], "")
        members.append({"id": row["id"], "jaccard": row.get("jaccard"), "duplicate": row.get("duplicate"),
                        "segments": marked(text, rep), **_lengths(text)})
        rep_marks = _union(rep_marks, marked(rep, text))
    return {"cluster": key, "representative": {"id": rep_id, "segments": rep_marks, **_lengths(rep)}, "members": members}


def _lengths(text: str) -> dict[str, Any]:
    shown = shown_text(text)
    return {"chars": shown["chars"], "cut": shown["cut"]}


def _union(first: list[list[Any]], second: list[list[Any]]) -> list[list[Any]]:
    """Marks of the same text from two diffs, a character marked when either marks it."""
    flags = [False] * sum(len(p) for p, _ in first)
    for marks in (first, second):
        at = 0
        for piece, diff in marks:
            if diff:
                flags[at:at + len(piece)] = [True] * len(piece)
            at += len(piece)
    text = "".join(p for p, _ in first)
    out: list[list[Any]] = []
    for ch, diff in zip(text, flags, strict=True):
        if out and out[-1][1] == diff:
            out[-1][0] += ch
        else:
            out.append([ch, diff])
    return out


def join(a: StepView, b: StepView, *, a_folder: str = "", b_folder: str = "", only: str = "all",
         page: int = 0, per: int = 20) -> dict[str, Any]:
    """The documents of ``a`` and ``b`` joined by id: counts, and page ``page`` of the rows ``only``
    asks for (``all``, ``differ``: in both with other texts, ``a`` or ``b``: in one alone)."""
    if only not in _JOIN_FILTERS:
        raise BrowseError(400, f"only must be one of {', '.join(_JOIN_FILTERS)}, got {only!r}")
    if page < 0 or not 0 < per <= 100:
        raise BrowseError(400, f"page must be >= 0 and per between 1 and 100, got page={page}, per={per}")
    left, right = _documents(a, a_folder), _documents(b, b_folder)
    if not left and not right:
        raise BrowseError(404, f"neither {a.output_name} nor {b.output_name} holds documents (id and text)")
    ids = list(left) + [i for i in right if i not in left]

    def kind(i: Any) -> str:
        if i not in right:
            return "a"
        if i not in left:
            return "b"
        return "same" if left[i] == right[i] else "differ"

    kinds = {i: kind(i) for i in ids}
    counts = {k: sum(1 for v in kinds.values() if v == k) for k in ("same", "differ", "a", "b")}
    chosen = ids if only == "all" else [i for i in ids if kinds[i] == only]
    rows = []
    for i in chosen[page * per:(page + 1) * per]:
        ta, tb = left.get(i), right.get(i)
        rows.append({"id": i, "kind": kinds[i],
                     "a": None if ta is None else {**_lengths(ta), "segments": marked(ta, tb) if tb is not None else [[ta[:TEXT_MAX], False]]},
                     "b": None if tb is None else {**_lengths(tb), "segments": marked(tb, ta) if ta is not None else [[tb[:TEXT_MAX], False]]}})
    return {"a": a.output_name, "b": b.output_name, "counts": counts, "only": only, "page": page, "per": per,
            "rows_total": len(chosen), "more": (page + 1) * per < len(chosen), "rows": rows,
            "cut": len(left) >= DOCUMENTS_MAX or len(right) >= DOCUMENTS_MAX}
