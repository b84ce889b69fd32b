"""Deduplication: exact documents and paragraphs, near-duplicate documents (MinHash LSH, verified)."""

from marin.processing.dedup.exact import (
    ExactDedupConfig,
    ParagraphDedupConfig,
    dedup_exact_documents,
    dedup_exact_paragraphs,
    exact_dedup_step,
    paragraph_dedup_step,
)
from marin.processing.dedup.fuzzy import FuzzyDedupConfig, FuzzyResult, fuzzy_dedup, fuzzy_dedup_step
from marin.processing.dedup.grouping import (
    GroupBy,
    Grouping,
    ZephyrGroupBy,
    default_group_by,
    group_in_process,
)
from marin.processing.dedup.keep import Keep, KeepRule, keep_rule
from marin.processing.dedup.minhash import (
    MinHasher,
    detection_probability,
    jaccard,
    optimal_bands,
    shingle_set,
)
from marin.processing.dedup.unionfind import UnionFind

__all__ = [
    "ExactDedupConfig",
    "FuzzyDedupConfig",
    "FuzzyResult",
    "GroupBy",
    "Grouping",
    "Keep",
    "KeepRule",
    "MinHasher",
    "ParagraphDedupConfig",
    "UnionFind",
    "ZephyrGroupBy",
    "dedup_exact_documents",
    "dedup_exact_paragraphs",
    "default_group_by",
    "detection_probability",
    "exact_dedup_step",
    "fuzzy_dedup",
    "fuzzy_dedup_step",
    "group_in_process",
    "jaccard",
    "keep_rule",
    "optimal_bands",
    "paragraph_dedup_step",
    "shingle_set",
]
