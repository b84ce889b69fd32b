"""A fastText quality classifier: trained from positive and negative documents, applied as attributes.

Training (:func:`quality_classifier_step`): every document becomes one fastText line,
``__label__hq`` or ``__label__lq`` followed by :func:`fasttext_text` of its text. A document is held
out for validation when the xxh3-64 of ``(seed, its text)`` falls below ``validation_fraction``
(identical texts never straddle the split). The training lines are shuffled with ``seed`` and
trained with ``thread=1`` and fastText's own ``seed`` in a fresh child process (see
:mod:`marin.processing.quality.fasttext_train` for why): two trainings give the same model bytes.

Output: ``model.bin`` and ``_summary.json`` with the counts and the validation precision, recall
and F1 of the positive label at probability 0.5 (and accuracy).

Classification (:func:`classify_step`): attributes ``{"score": P(positive)}`` per document, made
file by file (:mod:`marin.processing.per_file`): a later build over a changed set of document
shards, with the same model, scores only the new and changed shards.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import xxhash

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import (
    DOCUMENT_SUFFIXES,
    Shard,
    iter_corpus,
    list_shards,
    write_sidecar,
    write_summary,
)
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files
from marin.processing.quality.fasttext_train import MIN_MATRIX_VALUES, train_in_child
from marin.processing.text import words
from rigging import filesystem as fs

__all__ = [
    "MODEL_FILE",
    "NEGATIVE_LABEL",
    "POSITIVE_LABEL",
    "ClassifyConfig",
    "QualityClassifierConfig",
    "classify_step",
    "fasttext_text",
    "quality_classifier_step",
]

MODEL_FILE = "model.bin"
POSITIVE_LABEL = "__label__hq"
NEGATIVE_LABEL = "__label__lq"
_BATCH = 1024


def fasttext_text(text: str) -> str:
    """A document as one fastText input line: its words, space separated (no newline)."""
    return " ".join(words(text))


@dataclass(frozen=True)
class QualityClassifierConfig:
    """A fastText classifier of positive (high-quality) against negative documents."""

    positive: Any
    """High-quality documents (folder, glob, list, or a step/handle output)."""
    negative: Any
    """Low-quality documents."""
    validation_fraction: float = 0.1
    """Share of documents held out to measure precision and recall."""
    seed: int = 0
    """Seed of the split, the shuffle and fastText."""
    epoch: int = 5
    """Passes over the training lines."""
    lr: float = 0.1
    """Learning rate."""
    dim: int = 32
    """Embedding size."""
    word_ngrams: int = 2
    """Longest word n-gram used as a feature."""
    min_count: int = 1
    """Words seen fewer times are dropped."""
    bucket: int = 200_000
    """Hash buckets of the n-gram features (model size grows as bucket x dim)."""
    max_documents: int | None = None
    """At most this many documents of each class (None: all)."""

    def __post_init__(self) -> None:
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction}")
        for name in ("epoch", "dim", "word_ngrams", "min_count", "bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.bucket * self.dim < MIN_MATRIX_VALUES:
            raise ValueError(f"bucket * dim must be >= {MIN_MATRIX_VALUES} (so fastText's input matrix starts "
                             f"zeroed, see fasttext_train), got {self.bucket} * {self.dim}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.max_documents is not None and self.max_documents < 1:
            raise ValueError(f"max_documents must be >= 1 or None, got {self.max_documents}")


def _held_out(text: str, seed: int, fraction: float) -> bool:
    return xxhash.xxh3_64_intdigest(f"{seed}:{text}".encode()) / float(1 << 64) < fraction


def _lines(source: Any, label: str, limit: int | None) -> Iterator[tuple[str, str]]:
    shards = list_shards(source)
    for count, (_index, doc) in enumerate(iter_corpus(shards)):
        if limit is not None and count >= limit:
            return
        yield label, doc["text"]


def _positive_scores(model: Any, texts: list[str]) -> list[float]:
    scores = []
    for start in range(0, len(texts), _BATCH):
        labels, probs = model.predict([fasttext_text(t) for t in texts[start:start + _BATCH]], k=-1)
        for doc_labels, doc_probs in zip(labels, probs, strict=True):
            found = dict(zip(doc_labels, (float(p) for p in doc_probs), strict=True))
            scores.append(min(1.0, found.get(POSITIVE_LABEL, 0.0)))
    return scores


def quality_classifier_step(config: QualityClassifierConfig, output_path: str) -> None:
    """Step function: train the classifier, write ``model.bin`` and its validation metrics.

    Raises:
        ValueError: a class has no training or no validation documents.
    """
    import fasttext  # compiled extension, loaded by the step that needs it

    train: list[tuple[str, str]] = []
    validation: list[tuple[str, str]] = []
    for source, label in ((config.positive, POSITIVE_LABEL), (config.negative, NEGATIVE_LABEL)):
        for item in _lines(source, label, config.max_documents):
            (validation if _held_out(item[1], config.seed, config.validation_fraction) else train).append(item)
    for label in (POSITIVE_LABEL, NEGATIVE_LABEL):
        for name, rows in (("training", train), ("validation", validation)):
            if not any(lab == label for lab, _ in rows):
                raise ValueError(f"no {name} documents labelled {label}: give more documents or change "
                                 f"validation_fraction ({config.validation_fraction})")
    random.Random(config.seed).shuffle(train)
    with tempfile.TemporaryDirectory(prefix="marin-fasttext-") as scratch:
        train_file = os.path.join(scratch, "train.txt")
        with open(train_file, "w", encoding="utf-8") as f:
            f.writelines(f"{label} {fasttext_text(text)}\n" for label, text in train)
        local_model = os.path.join(scratch, MODEL_FILE)
        train_in_child(train_file, local_model, {
            "lr": config.lr, "dim": config.dim, "epoch": config.epoch, "wordNgrams": config.word_ngrams,
            "minCount": config.min_count, "bucket": config.bucket, "thread": 1, "seed": config.seed, "verbose": 0})
        model = fasttext.load_model(local_model)
        with open(local_model, "rb") as f:
            fs.atomic_write(fs.join(output_path, MODEL_FILE), f.read())
    scores = _positive_scores(model, [text for _, text in validation])
    truth = [label == POSITIVE_LABEL for label, _ in validation]
    predicted = [s >= 0.5 for s in scores]
    tp = sum(1 for t, p in zip(truth, predicted, strict=True) if t and p)
    fp = sum(1 for t, p in zip(truth, predicted, strict=True) if not t and p)
    fn = sum(1 for t, p in zip(truth, predicted, strict=True) if t and not p)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    write_summary(output_path, {
        "step": "quality_classifier", "model": MODEL_FILE,
        "train": {"positive": sum(1 for lab, _ in train if lab == POSITIVE_LABEL),
                  "negative": sum(1 for lab, _ in train if lab == NEGATIVE_LABEL)},
        "validation": {"positive": sum(truth), "negative": len(truth) - sum(truth), "threshold": 0.5,
                       "precision": round(precision, 6), "recall": round(recall, 6),
                       "f1": round(2 * precision * recall / (precision + recall), 6) if precision + recall else 0.0,
                       "accuracy": round(sum(1 for t, p in zip(truth, predicted, strict=True) if t == p) / len(truth), 6)},
    })


@dataclass(frozen=True)
class ClassifyConfig:
    """Scores from a trained quality classifier."""

    input: Any
    """Documents to score."""
    model: Any
    """The quality_classifier step's output folder (or a ``.bin`` file)."""


def _load_model(config: ClassifyConfig) -> Any:
    import fasttext  # compiled extension, loaded by the step that needs it

    model_path = str(config.model)
    if not model_path.endswith(".bin"):
        model_path = fs.join(model_path, MODEL_FILE)
    if not fs.exists(model_path):
        raise FileNotFoundError(f"no fastText model at {model_path}; give a quality_classifier output or a .bin file")
    with tempfile.TemporaryDirectory(prefix="marin-fasttext-") as scratch:
        local = os.path.join(scratch, MODEL_FILE)
        with open(local, "wb") as f:
            f.write(fs.read_bytes(model_path))
        model = fasttext.load_model(local)
    if POSITIVE_LABEL not in model.labels:
        raise ValueError(f"{model_path} has labels {model.labels}, not {POSITIVE_LABEL}: not a quality classifier")
    return model


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def classify_step(config: ClassifyConfig, output_path: str) -> None:
    """Step function: ``{"score": P(positive)}`` sidecars and ``_summary.json`` (documents, mean score,
    a 10-bin histogram of scores)."""
    model = _load_model(config)  # first: a bad model fails the step even when every shard is reused

    def one(f: InputFile) -> PartOutput:
        shard = Shard(f.path, f.name)
        docs = [doc for _i, doc in iter_corpus([shard])]
        scores = [round(s, 6) for s in _positive_scores(model, [d["text"] for d in docs])]
        write_sidecar(output_path, shard, [d["id"] for d in docs], [{"score": s} for s in scores])
        histogram = [0] * 10
        for s in scores:
            histogram[min(int(s * 10), 9)] += 1
        return PartOutput((f.name,), {"documents": len(scores), "score_sum": sum(scores), "histogram": histogram})

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    histogram = [sum(column) for column in zip(*(p.stats["histogram"] for p in parts), strict=True)] or [0] * 10
    total, documents = 0.0, 0
    for p in parts:  # the shards' sums added in order, as one pass over them would
        total += p.stats["score_sum"]
        documents += p.stats["documents"]
    write_summary(output_path, {"step": "classify", "shards": len(parts), "documents": documents,
                                "mean_score": round(total / documents, 6) if documents else None,
                                "histogram": histogram})
