"""Document quality: a fastText classifier (train, classify) and Gopher/C4 heuristic rules."""

from marin.processing.quality.classifier import (
    MODEL_FILE,
    NEGATIVE_LABEL,
    POSITIVE_LABEL,
    ClassifyConfig,
    QualityClassifierConfig,
    classify_step,
    fasttext_text,
    quality_classifier_step,
)
from marin.processing.quality.heuristics import (
    HeuristicRule,
    HeuristicsConfig,
    evaluate_heuristics,
    heuristics_step,
)

__all__ = [
    "MODEL_FILE",
    "NEGATIVE_LABEL",
    "POSITIVE_LABEL",
    "ClassifyConfig",
    "HeuristicRule",
    "HeuristicsConfig",
    "QualityClassifierConfig",
    "classify_step",
    "evaluate_heuristics",
    "fasttext_text",
    "heuristics_step",
    "quality_classifier_step",
]
