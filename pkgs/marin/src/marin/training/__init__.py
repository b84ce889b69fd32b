"""Marin's ``marin.training`` names (see :mod:`marin.training.training`)."""
