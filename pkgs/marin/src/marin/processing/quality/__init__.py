"""Document quality: a fastText classifier (train, classify) and Gopher, C4 and FineWeb heuristic rules."""

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
from marin.processing.quality.fineweb import fineweb_metrics, fineweb_words
from marin.processing.quality.heuristics import (
    C4_RULES,
    DEFAULT_RULES,
    FINEWEB_RULES,
    GOPHER_RULES,
    HeuristicRule,
    HeuristicsConfig,
    evaluate_heuristics,
    heuristics_step,
)

__all__ = [
    "C4_RULES",
    "DEFAULT_RULES",
    "FINEWEB_RULES",
    "GOPHER_RULES",
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
    "fineweb_metrics",
    "fineweb_words",
    "heuristics_step",
    "quality_classifier_step",
]
