"""Experiment helpers: lazy handles for corpora, tokenizers, tokenized data and training."""
