"""Marin's ``marin.processing`` names, for experiment files written for Marin."""
