"""Marin's ``marin.processing.tokenize`` names (see :mod:`marin.processing.tokenize.tokenize`)."""
