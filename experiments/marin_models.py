"""Marin's ``experiments.marin_models`` names. ``marin_tokenizer`` is this project's default tokenizer
(a byte-level BPE trained by a cached step, see :mod:`experiments.marin_tokenizer`), not Marin's
Hugging Face tokenizer, so that experiments run with nothing downloaded."""

from experiments.marin_tokenizer import marin_tokenizer

__all__ = ["marin_tokenizer"]
