"""What a tokenize step's output holds, under the name Marin's files use (``ArtifactStep[TokenizedCache]``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenizedCache"]


@dataclass(frozen=True)
class TokenizedCache:
    """A tokenized dataset: a folder with ``index.json``, ``tokenizer.json`` and ``train/`` and
    ``validation/`` ArrayRecord shards (format ``marin.tokenized/v1``), as
    :func:`marin.experiment.data.tokenized` writes it."""

    path: str
    """The step's output folder."""
