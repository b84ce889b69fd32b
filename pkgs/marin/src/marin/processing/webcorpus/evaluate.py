"""Scoring near-duplicate clusters against the ground truth of a generated web corpus.

Pairs, not documents, are scored:

* a **true pair** is a planted pair (same article family) whose real Jaccard is ``>= threshold``;
* a **predicted pair** is two documents put in the same cluster (same ``representative``);
* recall = true pairs predicted / true pairs (only pairs whose documents are both present);
* precision = predicted pairs that are true pairs / predicted pairs. A pair joined through a
  chain (both near a third document, below the threshold to each other) counts against it.

Templated pages (shops repeating one block) must stay apart: ``templated_merged`` is the share
of them that ended in a cluster of more than one document.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

__all__ = ["score_clusters"]


def score_clusters(truth: Mapping[str, Any], representative: Mapping[Any, Any], threshold: float) -> dict[str, Any]:
    """Precision, recall and templated-page merges of ``representative`` (doc id -> id of its cluster's
    representative; every document present must be a key)."""
    true_pairs = {(p["a"], p["b"]) for p in truth["pairs"]
                  if p["jaccard"] >= threshold and p["a"] in representative and p["b"] in representative}
    clusters: dict[Any, list[Any]] = {}
    for doc, rep in representative.items():
        clusters.setdefault(rep, []).append(doc)
    predicted = 0
    correct = 0
    for members in clusters.values():
        if len(members) < 2:
            continue
        predicted += len(members) * (len(members) - 1) // 2
        correct += sum(1 for a, b in itertools.combinations(sorted(members), 2) if (a, b) in true_pairs)
    found = sum(1 for a, b in true_pairs if representative[a] == representative[b])
    templated = [doc for shop in truth["templated"].values() for doc in shop["pages"] if doc in representative]
    sizes = {rep: len(members) for rep, members in clusters.items()}
    merged = sum(1 for doc in templated if sizes[representative[doc]] > 1)
    below = {(p["a"], p["b"]) for p in truth["pairs"] if p["jaccard"] < threshold}
    return {
        "true_pairs": len(true_pairs), "predicted_pairs": predicted, "correct_pairs": correct,
        "recall": found / len(true_pairs) if true_pairs else 1.0,
        "precision": correct / predicted if predicted else 1.0,
        "planted_below_threshold_merged": sum(1 for a, b in below if a in representative and b in representative
                                              and representative[a] == representative[b]),
        "planted_below_threshold": len(below),
        "templated_pages": len(templated), "templated_merged": merged,
        "templated_merged_fraction": merged / len(templated) if templated else 0.0,
    }
